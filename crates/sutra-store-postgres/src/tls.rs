//! TLS to PostgreSQL, set the way libpq's users set it: the URL's `sslmode` and `sslrootcert`
//! (or libpq's `PGSSLMODE` and `PGSSLROOTCERT`, which sqlx reads beneath the URL). sqlx speaks
//! the TLS itself — rustls on ring, trusting the platform's roots and the certificates of
//! `sslrootcert` — so this module only checks the settings before anything connects, and gives
//! them libpq's meaning where sqlx's differs (docs/decisions/0034-tls-to-postgresql.md):
//!
//! - a mode that is not one of libpq's, in the URL or in `PGSSLMODE`, refuses the start (sqlx
//!   drops a bad `PGSSLMODE` silently, and would then merely *prefer* TLS);
//! - a root certificate file that cannot be read or holds no certificate refuses the start,
//!   rather than every connection failing later;
//! - `sslmode=require` with a root certificate file verifies the server's certificate against it
//!   (`verify-ca`), as libpq does;
//! - `sslrootcert=system` (libpq 16) trusts the platform's roots alone, and means
//!   `sslmode=verify-full`: a weaker mode with it is refused, as libpq refuses it.

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sutra_store::{Error, Result};
use url::Url;

/// The names sqlx takes for the mode, in the URL; the last one given wins, as in sqlx.
const MODE: [&str; 2] = ["sslmode", "ssl-mode"];
/// The names sqlx takes for the root certificate file, in the URL.
const ROOT_CERT: [&str; 3] = ["sslrootcert", "ssl-root-cert", "ssl-ca"];
/// libpq's value of `sslrootcert` for "the platform's roots".
const SYSTEM: &str = "system";

/// What the TLS settings ask of a connection beyond what sqlx parses from the URL itself.
pub struct Tls {
    /// The mode, once libpq's rules have had their say; `None`: sqlx's default (`prefer`).
    mode: Option<PgSslMode>,
    /// `sslrootcert=system`: no file beside the platform's roots.
    platform_roots_only: bool,
}

/// Reads and checks the TLS settings of `url`, and of the environment beneath it (`environment`
/// reads a variable: `PGSSLMODE`, `PGSSLROOTCERT`), before sqlx parses them (see the module's
/// doc).
pub fn settings(url: &Url, environment: impl Fn(&str) -> Option<String>) -> Result<Tls> {
    let setting = |names: &[&str], variable: &str| {
        url.query_pairs()
            .filter(|(name, _)| names.contains(&name.as_ref()))
            .last()
            .map(|(_, value)| value.into_owned())
            .or_else(|| environment(variable))
    };
    let mode = setting(&MODE, "PGSSLMODE")
        .map(|mode| parse_mode(&mode))
        .transpose()?;
    Ok(match setting(&ROOT_CERT, "PGSSLROOTCERT") {
        Some(roots) if roots == SYSTEM => match mode {
            None | Some(PgSslMode::VerifyFull) => Tls {
                mode: Some(PgSslMode::VerifyFull),
                platform_roots_only: true,
            },
            Some(_) => {
                return Err(Error::Unavailable(
                    "sslrootcert=system trusts any certificate the platform's roots vouch for, \
                     so it needs sslmode=verify-full (as in libpq): set it, or leave sslmode out"
                        .to_owned(),
                ));
            }
        },
        Some(roots) => {
            check_roots(Path::new(&roots))?;
            Tls {
                mode: match mode {
                    Some(PgSslMode::Require) => Some(PgSslMode::VerifyCa),
                    other => other,
                },
                platform_roots_only: false,
            }
        }
        None => Tls {
            mode,
            platform_roots_only: false,
        },
    })
}

impl Tls {
    /// `options`, as sqlx parsed them from the same URL, with these settings applied.
    pub fn apply(&self, options: PgConnectOptions) -> PgConnectOptions {
        let options = match self.mode {
            Some(mode) => options.ssl_mode(mode),
            None => options,
        };
        if self.platform_roots_only {
            // sqlx would read a file named `system`; an empty bundle adds nothing to the
            // platform's roots, which sqlx always trusts.
            options.ssl_root_cert_from_pem(Vec::new())
        } else {
            options
        }
    }
}

fn parse_mode(mode: &str) -> Result<PgSslMode> {
    mode.parse().map_err(|_| {
        Error::Unavailable(format!(
            "sslmode `{mode}` is not one of disable, allow, prefer, require, verify-ca, \
             verify-full (libpq's modes)"
        ))
    })
}

/// sqlx reads the file again at every connection, so that a renewed CA needs no restart; this
/// reads it once at the start, so that a wrong path is told at once and plainly.
fn check_roots(path: &Path) -> Result<()> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| {
        Error::Unavailable(format!(
            "cannot read sslrootcert {shown}: {e}; name a PEM file of the certificate \
             authorities that sign the server's certificate"
        ))
    })?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Unavailable(format!("sslrootcert {shown} is not PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(Error::Unavailable(format!(
            "sslrootcert {shown} holds no certificate (`-----BEGIN CERTIFICATE-----`)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    /// A certificate's PEM; its content does not matter to the checks, only its framing.
    const CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

    /// The mode a connection to `url` would use, as `Debug` text (sqlx's mode has no `PartialEq`).
    fn mode_of(url: &str, environment: &[(&str, &str)]) -> Result<String> {
        let variable = |name: &str| {
            environment
                .iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, value)| (*value).to_owned())
        };
        let tls = settings(&Url::parse(url).expect("a URL"), variable)?;
        let options = PgConnectOptions::from_str(url).expect("sqlx parses it");
        Ok(format!("{:?}", tls.apply(options).get_ssl_mode()))
    }

    fn roots_file(name: &str, content: &str) -> String {
        let path = std::env::temp_dir().join(format!("sutra-tls-{}-{name}", std::process::id()));
        std::fs::write(&path, content).expect("write a roots file");
        path.display().to_string()
    }

    #[test]
    fn a_mode_libpq_does_not_know_refuses_the_start_from_the_url_or_the_environment() {
        let error = mode_of("postgres://db/sutra", &[("PGSSLMODE", "verify_full")]).unwrap_err();
        assert!(
            error.to_string().contains("sslmode `verify_full`"),
            "{error}"
        );
        assert_eq!(
            mode_of("postgres://db/sutra", &[("PGSSLMODE", "verify-full")]),
            Ok("VerifyFull".to_owned())
        );
        assert_eq!(
            mode_of(
                "postgres://db/sutra?sslmode=disable",
                &[("PGSSLMODE", "require")]
            ),
            Ok("Disable".to_owned()),
            "the URL wins over the environment, as in sqlx and libpq"
        );
    }

    #[test]
    fn a_root_certificate_file_that_cannot_serve_refuses_the_start() {
        let missing = "/nonexistent/sutra-ca.pem";
        let error = mode_of(
            &format!("postgres://db/sutra?sslmode=verify-full&sslrootcert={missing}"),
            &[],
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("cannot read sslrootcert"),
            "{error}"
        );
        let empty = roots_file("empty.pem", "no certificate here\n");
        let error = mode_of(&format!("postgres://db/sutra?sslrootcert={empty}"), &[]).unwrap_err();
        assert!(
            error.to_string().contains("holds no certificate"),
            "{error}"
        );
        let _ = std::fs::remove_file(empty);
    }

    #[test]
    fn require_with_a_root_certificate_file_verifies_the_chain_as_in_libpq() {
        let roots = roots_file("ca.pem", CERTIFICATE);
        assert_eq!(
            mode_of(
                &format!("postgres://db/s?sslmode=require&sslrootcert={roots}"),
                &[]
            ),
            Ok("VerifyCa".to_owned())
        );
        assert_eq!(
            mode_of(
                "postgres://db/s?sslmode=require",
                &[("PGSSLROOTCERT", &roots)]
            ),
            Ok("VerifyCa".to_owned())
        );
        assert_eq!(
            mode_of("postgres://db/s?sslmode=require", &[]),
            Ok("Require".to_owned())
        );
        let _ = std::fs::remove_file(roots);
    }

    #[test]
    fn sslrootcert_system_means_verify_full_and_refuses_a_weaker_mode() {
        assert_eq!(
            mode_of("postgres://db/s?sslrootcert=system", &[]),
            Ok("VerifyFull".to_owned())
        );
        let error = mode_of("postgres://db/s?sslrootcert=system&sslmode=require", &[]).unwrap_err();
        assert!(error.to_string().contains("verify-full"), "{error}");
    }
}
