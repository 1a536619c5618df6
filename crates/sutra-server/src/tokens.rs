//! API tokens (`sutra.auth.tokens`, SPEC §3–§4): each binds a bearer secret to one tenant and a
//! set of roles.
//!
//! The secrets are kept only as SHA-256 digests, taken when the configuration is read, so that
//! nothing the server holds or prints afterwards contains one; an operator may even configure
//! the digest alone (`token-sha256`), or keep the secret in a file of its own (`token-file`).
//! Presented tokens are hashed and compared with every digest in constant time. No message here
//! ever includes a secret: a bad entry is named by its position and tenant.
//!
//! Two spellings, one meaning. In `sutra.yaml`, a list:
//!
//! ```yaml
//! sutra:
//!   auth:
//!     tokens:
//!       - { tenant: acme, roles: [admin], token-file: /run/secrets/acme-admin }
//!       - { tenant: acme, roles: [worker, sender], token-sha256: 5e88…d1 }
//!       - { roles: [operator], token-file: /run/secrets/operator }
//! ```
//!
//! In one environment variable (`SUTRA_AUTH_TOKENS`), entries separated by `;`, each
//! `TENANT:ROLE[,ROLE…]:SECRET` where SECRET is the token itself, `sha256:HEX` or `file:PATH`:
//! `acme:admin:file:/run/secrets/acme-admin; acme:worker,sender:sha256:5e88…d1`. The list form
//! is accepted there too, as JSON.
//!
//! The `operator` role belongs to no tenant (decision 0076): its entry names none (`:operator:…`
//! in the compact form) and no other role, and its token reads the fleet's operator views —
//! every tenant's counts — and nothing of any tenant's rows.
//!
//! Or from a file (`sutra.auth.tokens-file`) holding either form: the [`Keyring`] then reads it
//! again when it changes and on SIGHUP, and replaces the tokens in force whole — a token removed
//! from the file stops working at the next reload, without a restart. A file that no longer
//! parses leaves the tokens in force as they were, and the log says so, never what it held.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use sutra_core::check::{TENANT_NAME_HINT, is_tenant_name};

/// Who may call what: `sender` sends on channels, `worker` works tasks, `admin` deploys and
/// administers its tenant's instances and sees its tenant's figures, `operator` sees the
/// fleet's figures and acts for no tenant. Roles do not imply one another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Admin,
    Worker,
    Sender,
    Operator,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Worker, Role::Sender, Role::Operator];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Worker => "worker",
            Role::Sender => "sender",
            Role::Operator => "operator",
        }
    }

    fn parse(text: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == text)
            .ok_or_else(|| format!("unknown role `{text}`; use admin, worker, sender or operator"))
    }
}

/// What a token grants: a tenant to act for (none for the operator's), and roles to act in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub tenant: Option<String>,
    pub roles: BTreeSet<Role>,
}

/// The configured tokens, as digests.
#[derive(Clone, PartialEq, Eq)]
pub struct Tokens {
    entries: Vec<(Secret, Grant)>,
}

/// A token's SHA-256 digest.
#[derive(Clone, PartialEq, Eq)]
struct Secret([u8; 32]);

/// The shortest token accepted: shorter ones are guessable.
const TOKEN_CHARS_MIN: usize = 16;

impl Tokens {
    /// Reads the value of `sutra.auth.tokens`: the list (from `sutra.yaml`, or JSON) or the
    /// compact form (see the module's doc).
    pub fn parse(value: &str) -> Result<Tokens, String> {
        let value = value.trim();
        let entries = if value.starts_with('[') {
            listed(value)?
        } else {
            compact(value)?
        };
        if entries.is_empty() {
            return Err("no tokens are listed; to run without tokens, leave the key unset".into());
        }
        let tokens = entries
            .into_iter()
            .enumerate()
            .map(|(n, entry)| entry.resolve().map_err(|why| entry.blame(n, &why)))
            .collect::<Result<Vec<_>, _>>()?;
        refuse_repeats(&tokens)?;
        Ok(Tokens { entries: tokens })
    }

    /// What `presented` grants, if it is one of the tokens. Every digest is compared, each in
    /// constant time, so the time taken tells nothing about how close a guess came.
    pub fn verify(&self, presented: &str) -> Option<&Grant> {
        let digest = Secret::of(presented);
        self.entries.iter().fold(None, |found, (secret, grant)| {
            if secret.matches(&digest) {
                Some(grant)
            } else {
                found
            }
        })
    }

    /// The tenants tokens act for, for the startup log.
    pub fn tenants(&self) -> BTreeSet<&str> {
        self.entries
            .iter()
            .filter_map(|(_, grant)| grant.tenant.as_deref())
            .collect()
    }

    /// Whether an `operator` token is among them, for the startup log.
    pub fn operator(&self) -> bool {
        self.entries
            .iter()
            .any(|(_, grant)| grant.roles.contains(&Role::Operator))
    }
}

/// The tokens of a file: its whole content is the value `sutra.auth.tokens` would hold.
pub fn read_file(path: &Path) -> Result<Tokens, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    Tokens::parse(&text)
}

/// The tokens in force, replaced whole when their file changes.
pub struct Keyring {
    current: RwLock<Arc<Tokens>>,
    /// The file and the modification time it had when it was last read.
    file: Option<(PathBuf, RwLock<Option<SystemTime>>)>,
}

impl Keyring {
    /// Tokens that never change (`sutra.auth.tokens`).
    pub fn fixed(tokens: Tokens) -> Keyring {
        Keyring {
            current: RwLock::new(Arc::new(tokens)),
            file: None,
        }
    }

    /// Tokens read from `path` (already read once, as `tokens`), read again by
    /// [`Keyring::reload`].
    pub fn from_file(tokens: Tokens, path: PathBuf) -> Keyring {
        let modified = modified(&path);
        Keyring {
            current: RwLock::new(Arc::new(tokens)),
            file: Some((path, RwLock::new(modified))),
        }
    }

    pub fn current(&self) -> Arc<Tokens> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The file, if the tokens come from one.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_ref().map(|(path, _)| path.as_path())
    }

    /// Reads the file again if `always` or if it changed since the last read; returns the
    /// tenants of the tokens now in force when it replaced them. A file that cannot be read or
    /// parsed changes nothing.
    pub fn reload(&self, always: bool) -> Result<Option<BTreeSet<String>>, String> {
        let Some((path, seen)) = &self.file else {
            return Ok(None);
        };
        let now = modified(path);
        if !always && now == *seen.read().unwrap_or_else(|p| p.into_inner()) {
            return Ok(None);
        }
        *seen.write().unwrap_or_else(|p| p.into_inner()) = now;
        let tokens = read_file(path)?;
        let tenants = tokens.tenants().into_iter().map(str::to_owned).collect();
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(tokens);
        Ok(Some(tenants))
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
}

/// Shows how many tokens there are and for whom, never a digest: settings are printed whole.
impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tokens({} for tenants {:?})",
            self.entries.len(),
            self.tenants()
        )
    }
}

impl Secret {
    fn of(token: &str) -> Secret {
        Secret(Sha256::digest(token.as_bytes()).into())
    }

    /// Constant-time equality: every byte is looked at whatever the earlier ones were.
    fn matches(&self, other: &Secret) -> bool {
        let difference = self
            .0
            .iter()
            .zip(other.0)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(difference) == 0
    }
}

/// One entry as written, before its secret is read and hashed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Entry {
    /// `None` for the operator's token, which belongs to no tenant.
    tenant: Option<String>,
    roles: Vec<String>,
    token: Option<String>,
    token_file: Option<String>,
    token_sha256: Option<String>,
}

impl Entry {
    fn resolve(&self) -> Result<(Secret, Grant), String> {
        if let Some(tenant) = &self.tenant
            && !is_tenant_name(tenant)
        {
            return Err(format!(
                "`{tenant}` is not a valid tenant name: {TENANT_NAME_HINT}"
            ));
        }
        if self.roles.is_empty() {
            return Err(
                "`roles` is empty; give at least one of admin, worker, sender, or operator alone"
                    .into(),
            );
        }
        let roles: BTreeSet<Role> = self
            .roles
            .iter()
            .map(|role| Role::parse(role))
            .collect::<Result<_, _>>()?;
        belongs(self.tenant.is_some(), &roles)?;
        let grant = Grant {
            tenant: self.tenant.clone(),
            roles,
        };
        Ok((self.secret()?, grant))
    }

    fn secret(&self) -> Result<Secret, String> {
        match (&self.token, &self.token_file, &self.token_sha256) {
            (Some(token), None, None) => Ok(Secret::of(checked_token(token)?)),
            (None, Some(path), None) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the token file {path}: {e}"))?;
                let token = checked_token(text.trim_end_matches(['\n', '\r']))
                    .map_err(|why| format!("the token file {path}: {why}"))?;
                Ok(Secret::of(token))
            }
            (None, None, Some(hex)) => digest(hex),
            _ => Err("give exactly one of `token`, `token-file` and `token-sha256`".into()),
        }
    }

    /// The message for entry `n` (counted from 1, as people count), naming it by its tenant.
    fn blame(&self, n: usize, why: &str) -> String {
        match &self.tenant {
            Some(tenant) => format!("entry {} (tenant `{tenant}`): {why}", n + 1),
            None => format!("entry {} (no tenant): {why}", n + 1),
        }
    }
}

/// The operator's role belongs to no tenant, and every other role acts for one: a token holds
/// either the operator's role alone without a tenant, or tenant roles with their tenant.
fn belongs(has_tenant: bool, roles: &BTreeSet<Role>) -> Result<(), String> {
    let operator = roles.contains(&Role::Operator);
    match (operator, has_tenant) {
        (true, true) => Err(
            "the `operator` role belongs to no tenant: give it an entry of its own without              `tenant`"
                .into(),
        ),
        (true, false) if roles.len() > 1 => Err(
            "the `operator` role acts for no tenant, and the other roles act for one: give the              operator a token of its own"
                .into(),
        ),
        (false, false) => Err(
            "`tenant` is missing: every role but `operator` acts for a tenant".into(),
        ),
        _ => Ok(()),
    }
}

/// A token must be a bearer token (RFC 6750's `b64token`: letters, digits, `-._~+/`, trailing
/// `=`), so that it can travel in a header unquoted and never contains the compact form's
/// separators.
fn checked_token(token: &str) -> Result<&str, String> {
    let body = token.trim_end_matches('=');
    let well_formed = !body.is_empty()
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~+/".contains(c));
    if !well_formed {
        return Err(
            "the token has characters a bearer token cannot have; use letters, digits and -._~+/ \
             (such as the output of `openssl rand -base64 32`)"
                .into(),
        );
    }
    if token.chars().count() < TOKEN_CHARS_MIN {
        return Err(format!(
            "the token is shorter than {TOKEN_CHARS_MIN} characters, short enough to guess; \
             use `openssl rand -base64 32`"
        ));
    }
    Ok(token)
}

fn digest(hex: &str) -> Result<Secret, String> {
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(hex, &mut bytes).map_err(|_| {
        "`token-sha256` must be 64 hexadecimal digits, as `printf %s \"$TOKEN\" | sha256sum` prints"
            .to_owned()
    })?;
    Ok(Secret(bytes))
}

fn listed(json: &str) -> Result<Vec<Entry>, String> {
    let mut reader = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut reader).map_err(|error| {
        // The path names the entry (`[1].roles`). A token YAML read as a number would be quoted
        // by the inner error, so that one is described instead.
        let at = error.path().to_string();
        if at.ends_with(".token") {
            format!("at {at}: the token must be text; quote it")
        } else {
            format!("at {at}: {}", error.into_inner())
        }
    })
}

fn compact(text: &str) -> Result<Vec<Entry>, String> {
    text.split(';')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .enumerate()
        .map(|(n, entry)| compact_entry(entry).map_err(|why| format!("entry {}: {why}", n + 1)))
        .collect()
}

/// `TENANT:ROLE[,ROLE…]:SECRET`, SECRET being a token, `sha256:HEX` or `file:PATH`; TENANT
/// empty for the operator's token.
fn compact_entry(text: &str) -> Result<Entry, String> {
    let mut fields = text.splitn(3, ':');
    let (Some(tenant), Some(roles), Some(secret)) = (fields.next(), fields.next(), fields.next())
    else {
        return Err("write it as TENANT:ROLE[,ROLE…]:TOKEN (or :sha256:HEX, or :file:PATH)".into());
    };
    let tenant = tenant.trim();
    let mut entry = Entry {
        tenant: (!tenant.is_empty()).then(|| tenant.to_owned()),
        roles: roles
            .split(',')
            .map(|role| role.trim().to_owned())
            .filter(|role| !role.is_empty())
            .collect(),
        token: None,
        token_file: None,
        token_sha256: None,
    };
    if let Some(hex) = secret.strip_prefix("sha256:") {
        entry.token_sha256 = Some(hex.to_owned());
    } else if let Some(path) = secret.strip_prefix("file:") {
        entry.token_file = Some(path.to_owned());
    } else {
        entry.token = Some(secret.to_owned());
    }
    Ok(entry)
}

/// Two entries with one token would make its grant depend on the order of the list.
fn refuse_repeats(tokens: &[(Secret, Grant)]) -> Result<(), String> {
    for (later, (secret, _)) in tokens.iter().enumerate() {
        if let Some(earlier) = tokens[..later].iter().position(|(s, _)| s == secret) {
            return Err(format!(
                "entries {} and {} have the same token; give each grant a token of its own",
                earlier + 1,
                later + 1
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACME: &str = "acme-admin-0123456789abcdef";
    const GLOBEX: &str = "globex-worker-0123456789abcdef";
    const OPERATOR: &str = "operator-0123456789abcdef";

    fn roles(grant: &Grant) -> Vec<&str> {
        grant.roles.iter().map(|role| role.as_str()).collect()
    }

    #[test]
    fn the_compact_form_binds_each_token_to_its_tenant_and_roles() {
        let tokens =
            Tokens::parse(&format!("acme:admin:{ACME}; globex:worker,sender:{GLOBEX}")).unwrap();

        let acme = tokens.verify(ACME).unwrap();
        let globex = tokens.verify(GLOBEX).unwrap();

        assert_eq!(
            (acme.tenant.as_deref(), roles(acme)),
            (Some("acme"), vec!["admin"])
        );
        assert_eq!(
            (globex.tenant.as_deref(), roles(globex)),
            (Some("globex"), vec!["worker", "sender"])
        );
        assert_eq!(tokens.verify("acme-admin-0123456789abcdeF"), None);
        assert_eq!(tokens.verify(""), None);
    }

    #[test]
    fn the_list_form_reads_tokens_from_files_and_digests() {
        let file = std::env::temp_dir().join(format!("sutra-token-{}", std::process::id()));
        std::fs::write(&file, format!("{GLOBEX}\n")).unwrap();
        let digest = hex::encode(Sha256::digest(ACME.as_bytes()));
        let list = serde_json::json!([
            {"tenant": "acme", "roles": ["admin"], "token-sha256": digest},
            {"tenant": "globex", "roles": ["worker"], "token-file": file},
        ]);

        let tokens = Tokens::parse(&list.to_string()).unwrap();
        std::fs::remove_file(&file).unwrap();

        assert_eq!(tokens.verify(ACME).unwrap().tenant.as_deref(), Some("acme"));
        assert_eq!(
            tokens.verify(GLOBEX).unwrap().tenant.as_deref(),
            Some("globex")
        );
    }

    #[test]
    fn the_operators_token_names_no_tenant_in_either_form() {
        let compact = Tokens::parse(&format!("acme:admin:{ACME}; :operator:{OPERATOR}")).unwrap();
        let list = serde_json::json!([{"roles": ["operator"], "token": OPERATOR}]);
        let listed = Tokens::parse(&list.to_string()).unwrap();
        for tokens in [compact, listed] {
            let operator = tokens.verify(OPERATOR).unwrap();
            assert_eq!(
                (operator.tenant.as_deref(), roles(operator)),
                (None, vec!["operator"])
            );
            assert!(tokens.operator());
        }
        assert!(
            !Tokens::parse(&format!("acme:admin:{ACME}"))
                .unwrap()
                .operator()
        );
    }

    #[test]
    fn the_operators_role_is_refused_with_a_tenant_or_beside_a_tenants_role() {
        let cases = [
            (
                format!("acme:operator:{OPERATOR}"),
                "entry 1 (tenant `acme`): the `operator` role belongs to no tenant",
            ),
            (
                format!(":operator,admin:{OPERATOR}"),
                "entry 1 (no tenant): the `operator` role acts for no tenant",
            ),
            (
                format!(":admin:{ACME}"),
                "entry 1 (no tenant): `tenant` is missing",
            ),
        ];
        for (value, expected) in cases {
            let error = Tokens::parse(&value).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
            assert!(
                !error.contains(OPERATOR) && !error.contains(ACME),
                "{error}"
            );
        }
    }

    #[test]
    fn a_bad_entry_is_named_by_position_and_tenant_and_its_secret_never_shown() {
        let cases = [
            (
                format!("acme:admin:{ACME}; globex:janitor:{GLOBEX}"),
                "entry 2 (tenant `globex`): unknown role `janitor`",
            ),
            (
                format!("Acme:admin:{ACME}"),
                "entry 1 (tenant `Acme`): `Acme` is not a valid tenant name",
            ),
            ("acme:admin:short".to_owned(), "shorter than 16 characters"),
            (
                format!("acme:admin:{ACME}\"x"),
                "characters a bearer token cannot have",
            ),
            ("acme:admin:sha256:abc".to_owned(), "64 hexadecimal digits"),
            (
                "acme:admin:file:/nonexistent/token".to_owned(),
                "cannot read the token file /nonexistent/token",
            ),
            (format!("acme:{ACME}"), "entry 1: write it as TENANT:ROLE"),
            (format!("acme::{ACME}"), "`roles` is empty"),
            (
                format!("acme:admin:{ACME}; acme:worker:{ACME}"),
                "entries 1 and 2 have the same token",
            ),
            (
                format!(
                    r#"[{{"tenant": "acme", "roles": ["admin"], "token": "{ACME}", "tokn": 1}}]"#
                ),
                "at [0].tokn: unknown field `tokn`",
            ),
            (
                format!(
                    r#"[{{"tenant": "acme", "roles": ["admin"], "token": "{ACME}", "token-file": "/x"}}]"#
                ),
                "exactly one of",
            ),
            ("[]".to_owned(), "no tokens are listed"),
            (
                r#"[{"tenant": "acme", "roles": ["admin"], "token": 12345678901234567}]"#
                    .to_owned(),
                "at [0].token: the token must be text",
            ),
        ];
        for (value, expected) in cases {
            let error = Tokens::parse(&value).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
            assert!(!error.contains(ACME) && !error.contains(GLOBEX), "{error}");
        }
    }

    #[test]
    fn debug_output_names_tenants_and_no_secret() {
        let tokens = Tokens::parse(&format!("acme:admin:{ACME}")).unwrap();
        let shown = format!("{tokens:?}");
        assert_eq!(shown, r#"Tokens(1 for tenants {"acme"})"#);
    }
}
