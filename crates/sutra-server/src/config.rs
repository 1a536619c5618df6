//! Configuration (SPEC §3): defaults, then `sutra.yaml`, then `SUTRA_*` environment variables,
//! then command-line flags — each later source overriding the earlier.
//!
//! Every key has one dotted name (`sutra.instance.claim-timeout`); its environment variable is
//! derived from it (`SUTRA_INSTANCE_CLAIM_TIMEOUT`), so the two can never drift apart. Unknown keys
//! in the file are errors, not silently ignored: a misspelt key that does nothing is the worst
//! kind of configuration bug.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use jiff::SignedDuration;
use sutra_core::duration::parse_duration;
use sutra_engine::settle::SEVERAL_HOLDERS;
use sutra_transport::BrokerUrls;

use crate::tokens::Tokens;

/// Every key, with its default (`None`: unset).
const KEYS: &[(&str, Option<&str>)] = &[
    ("sutra.datasource", Some("sqlite://sutra.db")),
    // PostgreSQL only: the most connections one replica opens, and whether it applies pending
    // schema migrations when it starts (off where `sutra db migrate` runs as a separate step).
    ("sutra.store.pool-size", Some("10")),
    ("sutra.store.migrate", Some("true")),
    // Whom the start-up migration runs as: the schema's owner, where replicas serve as a role
    // that may only read and write rows (docs/decisions/0019). Unset: the datasource's role.
    ("sutra.store.migrate-url", None),
    // Whom the store's cross-tenant work (sweep, timers, outbox, leases, purge) runs as: a member
    // of `sutra_system`, so that the serving role cannot read across tenants (decision 0040).
    // Unset: the datasource's role, which must then be a member itself.
    ("sutra.store.system-url", None),
    ("sutra.listen", Some("127.0.0.1:7480")),
    ("sutra.replica-id", None),
    ("sutra.engine.lanes", Some("1")),
    // Group commit (decision 0024): the most steps one transaction carries, and how long a lane
    // holds a group open for more once its queue is empty (0: only what is already queued).
    ("sutra.engine.group.max", Some("64")),
    ("sutra.engine.group.window", Some("PT0S")),
    ("sutra.instance.claim-timeout", Some("PT5M")),
    ("sutra.instance.sweep-interval", Some("PT1M")),
    ("sutra.instance.max-recoveries", Some("5")),
    ("sutra.intake.max-bytes", Some("1048576")),
    ("sutra.lease.ttl", Some("PT30S")),
    ("sutra.lease.poll", Some("PT10S")),
    ("sutra.history.retention", Some("P7D")),
    // How often the replica leading `history-purger` looks for history past the retention.
    ("sutra.history.purge-interval", Some("PT1M")),
    ("sutra.deployments.retire-interval", Some("PT1M")),
    ("sutra.outbox.batch", Some("100")),
    // The first retry's delay after a failed send; it doubles per failure, up to five minutes.
    ("sutra.outbox.backoff", Some("PT1S")),
    ("sutra.timers.batch", Some("100")),
    ("sutra.transports.amqp.url", None),
    ("sutra.transports.http.ca-file", None),
    ("sutra.transports.nats.url", None),
    ("sutra.auth.tokens", None),
    ("sutra.auth.tokens-file", None),
];

#[derive(Debug, Clone)]
pub struct Settings {
    pub datasource: String,
    pub store_pool_size: u32,
    pub store_migrate: bool,
    pub store_migrate_url: Option<String>,
    pub store_system_url: Option<String>,
    pub listen: SocketAddr,
    pub replica_id: String,
    pub lanes: usize,
    pub group_max: usize,
    pub group_window: SignedDuration,
    pub claim_timeout: SignedDuration,
    pub sweep_interval: SignedDuration,
    pub max_recoveries: u32,
    pub max_bytes: usize,
    pub timers_batch: u32,
    pub outbox_batch: u32,
    pub outbox_backoff: SignedDuration,
    pub lease_ttl: SignedDuration,
    pub lease_poll: SignedDuration,
    pub history_retention: SignedDuration,
    pub purge_interval: SignedDuration,
    /// How often the `retirement-gate` leader looks for draining versions to retire.
    pub retire_interval: SignedDuration,
    /// `None`: no tokens, so every request acts for tenant `default` with every role, which
    /// only a loopback listener allows.
    pub auth_tokens: Option<Tokens>,
    /// Where the tokens come from when they come from a file (`sutra.auth.tokens-file`): read
    /// again when it changes, or on SIGHUP, so that a token is rotated without a restart.
    pub auth_tokens_file: Option<PathBuf>,
    /// The brokers `emit` publishes to (`sutra.transports.amqp.url`, `….nats.url`).
    pub brokers: BrokerUrls,
    /// A PEM bundle of certificates `https://` webhooks are trusted by, beside the platform's
    /// roots (`sutra.transports.http.ca-file`).
    pub webhook_roots: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{path}: {reason}")]
    Malformed { path: String, reason: String },
    #[error("unknown configuration key `{key}` (from {origin}); known keys: {known}")]
    UnknownKey {
        key: String,
        origin: String,
        known: String,
    },
    #[error("`{key}` = `{value}` (from {origin}): {reason}")]
    Invalid {
        key: String,
        value: String,
        origin: String,
        reason: String,
    },
    /// A value holding secrets is never repeated in a message.
    #[error("`{key}` (from {origin}; its value holds secrets and is not shown): {reason}")]
    InvalidSecret {
        key: String,
        origin: String,
        reason: String,
    },
}

/// Raw values by key, each remembering where it came from (for error messages).
#[derive(Default)]
pub struct Sources {
    values: BTreeMap<String, (String, String)>,
}

impl Sources {
    pub fn defaults() -> Sources {
        let mut sources = Sources::default();
        for (key, value) in KEYS {
            if let Some(value) = value {
                sources.set(key, value, "the default");
            }
        }
        sources
    }

    fn set(&mut self, key: &str, value: &str, source: &str) {
        self.values
            .insert(key.to_owned(), (value.to_owned(), source.to_owned()));
    }

    /// Reads `sutra.yaml`-style YAML: nested maps or dotted keys, both allowed.
    pub fn file(mut self, path: &Path) -> Result<Sources, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let malformed = |reason: String| ConfigError::Malformed {
            path: shown.clone(),
            reason,
        };
        let tree = sutra_core::yaml::parse(&text)
            .map_err(|d| malformed(format!("line {}: {}", d.line, d.message)))?;
        let json = tree
            .to_json()
            .map_err(|at| malformed(format!("line {}: not a plain value", at.line)))?;
        let mut flat = BTreeMap::new();
        flatten("", &json, &mut flat);
        for (key, value) in flat {
            known(&key, &shown)?;
            self.set(&key, &value, &shown);
        }
        Ok(self)
    }

    /// `SUTRA_INSTANCE_CLAIM_TIMEOUT=PT5M` overrides `sutra.instance.claim-timeout`.
    pub fn environment(mut self, variables: impl IntoIterator<Item = (String, String)>) -> Sources {
        let by_variable: BTreeMap<String, &str> =
            KEYS.iter().map(|(key, _)| (env_name(key), *key)).collect();
        for (name, value) in variables {
            if let Some(key) = by_variable.get(&name) {
                self.set(key, &value, &format!("${name}"));
            }
        }
        self
    }

    /// A command-line flag for `key`.
    pub fn flag(mut self, key: &str, value: Option<&str>) -> Sources {
        if let Some(value) = value {
            self.set(key, value, "the command line");
        }
        self
    }

    pub fn settings(&self) -> Result<Settings, ConfigError> {
        Ok(Settings {
            datasource: self.text("sutra.datasource")?,
            store_pool_size: self.parsed("sutra.store.pool-size", positive)?,
            store_migrate: self.parsed("sutra.store.migrate", boolean)?,
            store_migrate_url: self.optional("sutra.store.migrate-url"),
            store_system_url: self.optional("sutra.store.system-url"),
            listen: self.parsed("sutra.listen", |v| {
                v.parse::<SocketAddr>().map_err(|e| e.to_string())
            })?,
            replica_id: match self.values.get("sutra.replica-id") {
                Some(_) => self.parsed("sutra.replica-id", replica_id)?,
                None => default_replica_id(),
            },
            lanes: self.parsed("sutra.engine.lanes", positive)?,
            group_max: self.parsed("sutra.engine.group.max", positive)?,
            group_window: self.parsed("sutra.engine.group.window", group_window)?,
            claim_timeout: self.parsed("sutra.instance.claim-timeout", duration)?,
            sweep_interval: self.parsed("sutra.instance.sweep-interval", duration)?,
            max_recoveries: self.parsed("sutra.instance.max-recoveries", positive)?,
            max_bytes: self.parsed("sutra.intake.max-bytes", positive)?,
            timers_batch: self.parsed("sutra.timers.batch", positive)?,
            outbox_batch: self.parsed("sutra.outbox.batch", positive)?,
            outbox_backoff: self.parsed("sutra.outbox.backoff", positive_duration)?,
            lease_ttl: self.parsed("sutra.lease.ttl", positive_duration)?,
            lease_poll: self.lease_poll()?,
            history_retention: self.parsed("sutra.history.retention", positive_duration)?,
            purge_interval: self.parsed("sutra.history.purge-interval", positive_duration)?,
            retire_interval: self.parsed("sutra.deployments.retire-interval", positive_duration)?,
            auth_tokens: self.auth_tokens()?,
            auth_tokens_file: self.optional("sutra.auth.tokens-file").map(PathBuf::from),
            webhook_roots: self
                .optional("sutra.transports.http.ca-file")
                .map(PathBuf::from),
            brokers: BrokerUrls {
                amqp: self.broker_url("sutra.transports.amqp.url", &["amqp://"])?,
                nats: self.broker_url("sutra.transports.nats.url", &["nats://"])?,
            },
        })
    }

    /// A broker URL may hold a password, so a wrong one is refused without being repeated.
    fn broker_url(&self, key: &str, schemes: &[&str]) -> Result<Option<String>, ConfigError> {
        let Some((value, origin)) = self.values.get(key) else {
            return Ok(None);
        };
        if schemes.iter().any(|scheme| value.starts_with(scheme)) {
            return Ok(Some(value.clone()));
        }
        Err(ConfigError::InvalidSecret {
            key: key.to_owned(),
            origin: origin.clone(),
            reason: format!(
                "expected a URL starting with {} (TLS is not supported yet)",
                schemes.join(" or ")
            ),
        })
    }

    fn optional(&self, key: &str) -> Option<String> {
        self.values.get(key).map(|(value, _)| value.clone())
    }

    /// The tokens of `sutra.auth.tokens`, or of the file `sutra.auth.tokens-file` names (not
    /// both: which would be in force?).
    fn auth_tokens(&self) -> Result<Option<Tokens>, ConfigError> {
        const FILE: &str = "sutra.auth.tokens-file";
        let Some((path, origin)) = self.values.get(FILE) else {
            return self.tokens("sutra.auth.tokens");
        };
        if self.values.contains_key("sutra.auth.tokens") {
            return Err(ConfigError::InvalidSecret {
                key: FILE.to_owned(),
                origin: origin.clone(),
                reason: "set either sutra.auth.tokens or sutra.auth.tokens-file, not both".into(),
            });
        }
        crate::tokens::read_file(std::path::Path::new(path))
            .map(Some)
            .map_err(|reason| ConfigError::InvalidSecret {
                key: FILE.to_owned(),
                origin: origin.clone(),
                reason,
            })
    }

    fn tokens(&self, key: &str) -> Result<Option<Tokens>, ConfigError> {
        let Some((value, origin)) = self.values.get(key) else {
            return Ok(None);
        };
        Tokens::parse(value)
            .map(Some)
            .map_err(|reason| ConfigError::InvalidSecret {
                key: key.to_owned(),
                origin: origin.clone(),
                reason,
            })
    }

    /// A leader renews every poll and stops at four fifths of the TTL after a renewal it sent
    /// (docs/decisions/0018): a poll of half the TTL or more would leave it no second try before
    /// it stops, and one of four fifths or more would make it stop between any two renewals.
    fn lease_poll(&self) -> Result<SignedDuration, ConfigError> {
        let ttl = self.parsed("sutra.lease.ttl", positive_duration)?;
        self.parsed("sutra.lease.poll", |value| match positive_duration(value)? {
            poll if poll < ttl / 2 => Ok(poll),
            _ => Err(format!(
                "expected less than half of sutra.lease.ttl ({ttl}), so that a leader can renew \
                 more than once before its lease runs out"
            )),
        })
    }

    fn text(&self, key: &str) -> Result<String, ConfigError> {
        self.parsed(key, |value| Ok(value.to_owned()))
    }

    fn parsed<T>(
        &self,
        key: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        let (value, source) = self
            .values
            .get(key)
            .expect("every parsed key has a default");
        parse(value).map_err(|reason| ConfigError::Invalid {
            key: key.to_owned(),
            value: value.clone(),
            origin: source.clone(),
            reason,
        })
    }
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(value: &str) -> Result<T, String> {
    match value.parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err("expected a whole number greater than 0".into()),
    }
}

fn boolean(value: &str) -> Result<bool, String> {
    value
        .parse()
        .map_err(|_| "expected true or false".to_owned())
}

fn duration(value: &str) -> Result<SignedDuration, String> {
    parse_duration(value).map_err(|e| e.to_string())
}

/// Every member of a group waits for the window before it is answered, so a long one only adds
/// latency: more than a second is a mistake, not a setting.
fn group_window(value: &str) -> Result<SignedDuration, String> {
    match duration(value)? {
        window if window >= SignedDuration::ZERO && window <= SignedDuration::from_secs(1) => {
            Ok(window)
        }
        _ => Err("expected a duration from PT0S to PT1S".into()),
    }
}

/// A zero backoff would resend a failing row in a tight loop.
fn positive_duration(value: &str) -> Result<SignedDuration, String> {
    match duration(value)? {
        positive if positive.is_positive() => Ok(positive),
        _ => Err("expected a duration greater than zero".into()),
    }
}

fn known(key: &str, source: &str) -> Result<(), ConfigError> {
    if KEYS.iter().any(|(k, _)| *k == key) {
        return Ok(());
    }
    let known = KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ");
    Err(ConfigError::UnknownKey {
        key: key.to_owned(),
        origin: source.to_owned(),
        known,
    })
}

fn flatten(prefix: &str, value: &serde_json::Value, out: &mut BTreeMap<String, String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, child, out);
            }
        }
        serde_json::Value::String(s) => {
            out.insert(prefix.to_owned(), s.clone());
        }
        other => {
            out.insert(prefix.to_owned(), other.to_string());
        }
    }
}

/// `sutra.instance.claim-timeout` → `SUTRA_INSTANCE_CLAIM_TIMEOUT`.
/// Every configuration key this version knows.
pub fn known_keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter().map(|(key, _)| *key)
}

pub fn env_name(key: &str) -> String {
    key.replace(['.', '-'], "_").to_ascii_uppercase()
}

/// Hostname plus a random suffix: stable for the process, distinct across restarts, so a
/// restarted replica never re-enters a claim its previous incarnation held.
/// A replica's id names it on the instances it holds callers for, where
/// [`SEVERAL_HOLDERS`] means "more than one replica": no replica may be called that.
fn replica_id(value: &str) -> Result<String, String> {
    if value == SEVERAL_HOLDERS {
        return Err(format!(
            "`{SEVERAL_HOLDERS}` marks an instance whose callers wait on several replicas; choose \
             another id"
        ));
    }
    Ok(value.to_owned())
}

fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sutra".into());
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    format!("{host}-{}", &suffix[suffix.len() - 8..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_defaults_and_flags_override_environment() {
        let env = vec![("SUTRA_INSTANCE_CLAIM_TIMEOUT".to_owned(), "PT2S".to_owned())];
        let settings = Sources::defaults()
            .environment(env.clone())
            .settings()
            .unwrap();
        assert_eq!(settings.claim_timeout, SignedDuration::from_secs(2));
        let settings = Sources::defaults()
            .environment(env)
            .flag("sutra.instance.claim-timeout", Some("PT3S"))
            .settings()
            .unwrap();
        assert_eq!(settings.claim_timeout, SignedDuration::from_secs(3));
    }

    #[test]
    fn a_bad_value_names_its_key_and_where_it_came_from() {
        let env = vec![("SUTRA_ENGINE_LANES".to_owned(), "zero".to_owned())];
        let error = Sources::defaults()
            .environment(env)
            .settings()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("sutra.engine.lanes") && error.contains("$SUTRA_ENGINE_LANES"),
            "{error}"
        );
    }

    #[test]
    fn the_several_holders_marker_is_no_replicas_id() {
        let error = Sources::defaults()
            .flag("sutra.replica-id", Some("*"))
            .settings()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("sutra.replica-id") && error.contains("several replicas"),
            "{error}"
        );
        let named = Sources::defaults()
            .flag("sutra.replica-id", Some("replica-a"))
            .settings()
            .unwrap();
        assert_eq!(named.replica_id, "replica-a");
    }

    #[test]
    fn env_names_derive_from_keys() {
        assert_eq!(
            env_name("sutra.instance.claim-timeout"),
            "SUTRA_INSTANCE_CLAIM_TIMEOUT"
        );
    }

    const TOKEN: &str = "acme-admin-0123456789abcdef";

    #[test]
    fn tokens_come_from_the_key_or_from_a_file_not_both() {
        let env = vec![
            (
                "SUTRA_AUTH_TOKENS".to_owned(),
                format!("acme:admin:{TOKEN}"),
            ),
            ("SUTRA_AUTH_TOKENS_FILE".to_owned(), "/nowhere".to_owned()),
        ];
        let error = Sources::defaults().environment(env).settings().unwrap_err();
        let error = error.to_string();
        assert!(error.contains("not both"), "{error}");
        assert!(!error.contains(TOKEN), "{error}");
    }

    #[test]
    fn tokens_mean_the_same_from_sutra_yaml_and_from_one_environment_variable() {
        let file = std::env::temp_dir().join(format!("sutra-config-{}.yaml", std::process::id()));
        let yaml = format!(
            "sutra:\n  auth:\n    tokens:\n      - tenant: acme\n        roles: [admin, worker]\n        token: {TOKEN}\n"
        );
        std::fs::write(&file, yaml).unwrap();
        let from_file = Sources::defaults().file(&file).unwrap().settings();
        std::fs::remove_file(&file).unwrap();
        let env = vec![(
            "SUTRA_AUTH_TOKENS".to_owned(),
            format!("acme:admin,worker:{TOKEN}"),
        )];
        let from_env = Sources::defaults().environment(env).settings();

        let from_file = from_file
            .unwrap()
            .auth_tokens
            .expect("tokens from the file");
        assert_eq!(Some(from_file), from_env.unwrap().auth_tokens);
    }

    #[test]
    fn a_bad_token_entry_is_named_and_the_value_is_not_shown() {
        let env = vec![(
            "SUTRA_AUTH_TOKENS".to_owned(),
            format!("acme:admin:{TOKEN}; globex:janitor:{TOKEN}x"),
        )];
        let error = Sources::defaults()
            .environment(env)
            .settings()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("sutra.auth.tokens")
                && error.contains("$SUTRA_AUTH_TOKENS")
                && error.contains("entry 2 (tenant `globex`): unknown role `janitor`"),
            "{error}"
        );
        assert!(!error.contains(TOKEN), "{error}");
    }

    #[test]
    fn a_lease_poll_of_half_the_ttl_or_more_is_refused() {
        let env = |ttl: &str, poll: &str| {
            vec![
                ("SUTRA_LEASE_TTL".to_owned(), ttl.to_owned()),
                ("SUTRA_LEASE_POLL".to_owned(), poll.to_owned()),
            ]
        };
        let error = Sources::defaults()
            .environment(env("PT10S", "PT5S"))
            .settings()
            .unwrap_err()
            .to_string();
        assert!(error.contains("sutra.lease.poll"), "{error}");
        let settings = Sources::defaults()
            .environment(env("PT3S", "PT1S"))
            .settings()
            .unwrap();
        assert_eq!(
            (settings.lease_ttl, settings.lease_poll),
            (SignedDuration::from_secs(3), SignedDuration::from_secs(1))
        );
    }

    #[test]
    fn a_zero_outbox_backoff_is_refused() {
        let env = vec![("SUTRA_OUTBOX_BACKOFF".to_owned(), "PT0S".to_owned())];
        let error = Sources::defaults().environment(env).settings().unwrap_err();
        assert!(
            error.to_string().contains("sutra.outbox.backoff"),
            "{error}"
        );
        let settings = Sources::defaults().settings().unwrap();
        assert_eq!(settings.outbox_backoff, SignedDuration::from_secs(1));
    }
}
