//! Configuration (SPEC §3): defaults, then `sutra.yaml`, then `SUTRA_*` environment variables,
//! then command-line flags — each later source overriding the earlier.
//!
//! Every key has one dotted name (`sutra.instance.claim-timeout`); its environment variable is
//! derived from it (`SUTRA_INSTANCE_CLAIM_TIMEOUT`), so the two can never drift apart. Unknown keys
//! in the file are errors, not silently ignored: a misspelt key that does nothing is the worst
//! kind of configuration bug. The engine's keys are read straight into its [`EngineConfig`],
//! and what the engine cannot run with — a value out of range, or keys that do not fit together
//! — is refused by [`EngineConfig::validate`], named with where its value came from
//! (docs/decisions/0044-what-the-configuration-refuses.md).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use jiff::SignedDuration;
use sutra_core::duration::parse_duration;
use sutra_engine::EngineConfig;
use sutra_engine::settle::SEVERAL_HOLDERS;
use sutra_transport::BrokerUrls;

use crate::connections::{self, descriptors::Descriptors};
use crate::redacted;
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
    // The HTTP server sheds what would hold its descriptors for nothing (decision 0075): a
    // request's head and body each have so long to arrive, a connection without a request so
    // long to send one, and connections are capped — unset, by what the process's
    // file-descriptor limit leaves beside the store, brokers and outbox.
    ("sutra.http.header-timeout", Some("PT10S")),
    ("sutra.http.idle-timeout", Some("PT1M")),
    ("sutra.http.body-timeout", Some("PT30S")),
    ("sutra.http.max-connections", None),
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
    ("sutra.schedules.poll", Some("PT1S")),
    ("sutra.outbox.batch", Some("100")),
    // The first retry's delay after a failed send; it doubles per failure, up to five minutes.
    ("sutra.outbox.backoff", Some("PT1S")),
    ("sutra.timers.batch", Some("100")),
    // The delivery ceiling (decision 0047): failed steps a delivery or a broker message gets,
    // and the wait after the first, doubling per failure up to the claim timeout.
    ("sutra.deliveries.max-attempts", Some("10")),
    ("sutra.deliveries.backoff", Some("PT1S")),
    // Items a `for-each` loops over at most (decision 0051).
    ("sutra.for-each.max-items", Some("10000")),
    // Calls nested below an instance a message started (decision 0052).
    ("sutra.call.max-depth", Some("16")),
    // Children an instance waits for at once (issue 48).
    ("sutra.call.max-children", Some("10000")),
    // What a step's expressions may spend, the largest value one may produce, and the largest
    // an instance's variables may grow (decision 0074).
    ("sutra.expressions.max-cost", Some("1000000")),
    ("sutra.expressions.max-value-bytes", Some("1048576")),
    ("sutra.instance.max-vars-bytes", Some("4194304")),
    // Live instances a tenant may have (issue 48).
    ("sutra.tenants.max-live-instances", Some("1000000")),
    // Schedule ticks a deployment may make per minute (issue 48, decision 0083).
    ("sutra.schedules.max-ticks-per-minute", Some("600")),
    // The shortest `remind.every` a deployment may ask for (issue 48, decision 0084).
    ("sutra.remind.min-every", Some("PT1S")),
    // The longest lock a task is granted: a longer one asked for is granted up to it (issue 48,
    // decision 0078).
    ("sutra.tasks.max-lock", Some("PT1H")),
    ("sutra.transports.amqp.url", None),
    ("sutra.transports.http.ca-file", None),
    ("sutra.transports.nats.url", None),
    ("sutra.auth.tokens", None),
    ("sutra.auth.tokens-file", None),
    // Whether the metrics name what tenants chose — flows, task topics, singleton channels —
    // with a `tenant` label; `/metrics` then takes the operator's token (decision 0076).
    ("sutra.metrics.tenant-labels", Some("false")),
];

/// What `sutra serve` runs with. `Debug` shows the datasource URLs without their passwords.
#[derive(Clone)]
pub struct Settings {
    pub datasource: String,
    pub store_pool_size: u32,
    pub store_migrate: bool,
    pub store_migrate_url: Option<String>,
    pub store_system_url: Option<String>,
    pub listen: SocketAddr,
    /// The HTTP server's timeouts and connection cap (`sutra.http.*`).
    pub http: connections::Limits,
    /// The engine's keys (`sutra.engine.*`, `sutra.instance.*`, leases, history, outbox, timers,
    /// retirement) and the replica's id, read into the engine's own configuration and checked
    /// by [`EngineConfig::validate`].
    pub engine: EngineConfig,
    pub max_bytes: usize,
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

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = |url: &Option<String>| url.as_deref().map(redacted);
        f.debug_struct("Settings")
            .field("datasource", &redacted(&self.datasource))
            .field("store_pool_size", &self.store_pool_size)
            .field("store_migrate", &self.store_migrate)
            .field("store_migrate_url", &url(&self.store_migrate_url))
            .field("store_system_url", &url(&self.store_system_url))
            .field("listen", &self.listen)
            .field("http", &self.http)
            .field("engine", &self.engine)
            .field("max_bytes", &self.max_bytes)
            .field("auth_tokens", &self.auth_tokens)
            .field("auth_tokens_file", &self.auth_tokens_file)
            .field("brokers", &self.brokers)
            .field("webhook_roots", &self.webhook_roots)
            .finish()
    }
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
        let brokers = BrokerUrls {
            amqp: self.broker_url("sutra.transports.amqp.url", &["amqp://"])?,
            nats: self.broker_url("sutra.transports.nats.url", &["nats://"])?,
        };
        let datasource = self.text("sutra.datasource")?;
        let store_pool_size = self.parsed("sutra.store.pool-size", positive)?;
        let store_system_url = self.optional("sutra.store.system-url");
        let engine = self.engine(&brokers)?;
        let reserve = connections::descriptors::Reserve {
            datasource: &datasource,
            pool_size: store_pool_size,
            system_pool: store_system_url.is_some(),
            outbox_batch: engine.outbox_batch,
            brokers: brokers.configured().len(),
        };
        let http = self.http(Descriptors::of_this_process(reserve.descriptors()))?;
        Ok(Settings {
            datasource,
            store_pool_size,
            store_migrate: self.parsed("sutra.store.migrate", boolean)?,
            store_migrate_url: self.optional("sutra.store.migrate-url"),
            store_system_url,
            listen: self.parsed("sutra.listen", |v| {
                v.parse::<SocketAddr>().map_err(|e| e.to_string())
            })?,
            http,
            engine,
            max_bytes: self.parsed("sutra.intake.max-bytes", positive)?,
            auth_tokens: self.auth_tokens()?,
            auth_tokens_file: self.optional("sutra.auth.tokens-file").map(PathBuf::from),
            webhook_roots: self
                .optional("sutra.transports.http.ca-file")
                .map(PathBuf::from),
            brokers,
        })
    }

    /// The engine's configuration, each key read as what it is and the whole checked by the
    /// engine's own rules; a refusal names its key and where the value came from.
    fn engine(&self, brokers: &BrokerUrls) -> Result<EngineConfig, ConfigError> {
        let engine = EngineConfig {
            replica_id: match self.values.get("sutra.replica-id") {
                Some(_) => self.parsed("sutra.replica-id", replica_id)?,
                None => default_replica_id(),
            },
            lanes: self.parsed("sutra.engine.lanes", number)?,
            group_max: self.parsed("sutra.engine.group.max", number)?,
            group_window: self.parsed("sutra.engine.group.window", duration)?,
            claim_timeout: self.parsed("sutra.instance.claim-timeout", duration)?,
            sweep_interval: self.parsed("sutra.instance.sweep-interval", duration)?,
            max_recoveries: self.parsed("sutra.instance.max-recoveries", number)?,
            deliveries_batch: self.parsed("sutra.timers.batch", number)?,
            deliveries_max_attempts: self.parsed("sutra.deliveries.max-attempts", number)?,
            deliveries_backoff: self.parsed("sutra.deliveries.backoff", duration)?,
            for_each_max_items: self.parsed("sutra.for-each.max-items", number)?,
            call_max_depth: self.parsed("sutra.call.max-depth", number)?,
            call_max_children: self.parsed("sutra.call.max-children", number)?,
            expression_max_cost: self.parsed("sutra.expressions.max-cost", number)?,
            expression_max_value_bytes: self.parsed("sutra.expressions.max-value-bytes", number)?,
            instance_max_vars_bytes: self.parsed("sutra.instance.max-vars-bytes", number)?,
            tenant_max_live_instances: self.parsed("sutra.tenants.max-live-instances", number)?,
            schedule_max_ticks_per_minute: self
                .parsed("sutra.schedules.max-ticks-per-minute", number)?,
            remind_min_every: self.parsed("sutra.remind.min-every", duration)?,
            task_max_lock: self.parsed("sutra.tasks.max-lock", duration)?,
            outbox_batch: self.parsed("sutra.outbox.batch", number)?,
            outbox_backoff: self.parsed("sutra.outbox.backoff", duration)?,
            lease_ttl: self.parsed("sutra.lease.ttl", duration)?,
            lease_poll: self.parsed("sutra.lease.poll", duration)?,
            history_retention: self.parsed("sutra.history.retention", duration)?,
            purge_interval: self.parsed("sutra.history.purge-interval", duration)?,
            retire_interval: self.parsed("sutra.deployments.retire-interval", duration)?,
            schedules_poll: self.parsed("sutra.schedules.poll", duration)?,
            brokers: brokers.configured(),
            metric_tenant_labels: self.parsed("sutra.metrics.tenant-labels", boolean)?,
            ..EngineConfig::default()
        };
        engine.validate().map_err(|refusal| {
            let (value, origin) = self
                .values
                .get(refusal.key)
                .expect("every key the engine checks has a default");
            ConfigError::Invalid {
                key: refusal.key.to_owned(),
                value: value.clone(),
                origin: origin.clone(),
                reason: refusal.reason,
            }
        })?;
        Ok(engine)
    }

    /// The HTTP server's keys; the connection cap must leave room in the file-descriptor limit
    /// for what the rest of the process holds (`descriptors`).
    fn http(&self, descriptors: Descriptors) -> Result<connections::Limits, ConfigError> {
        const CAP: &str = "sutra.http.max-connections";
        let max_connections = if self.values.contains_key(CAP) {
            self.parsed(CAP, |value| descriptors.fit(positive(value)?))?
        } else {
            descriptors
                .derived_cap()
                .map_err(|reason| ConfigError::Invalid {
                    key: CAP.to_owned(),
                    value: "derived".to_owned(),
                    origin: "the default".to_owned(),
                    reason,
                })?
        };
        Ok(connections::Limits {
            header_timeout: self.parsed("sutra.http.header-timeout", positive_duration)?,
            idle_timeout: self.parsed("sutra.http.idle-timeout", positive_duration)?,
            body_timeout: self.parsed("sutra.http.body-timeout", positive_duration)?,
            max_connections,
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

/// A whole number; what range it must lie in is the engine's rule ([`EngineConfig::validate`]).
fn number<T: std::str::FromStr>(value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| "expected a whole number".to_owned())
}

fn boolean(value: &str) -> Result<bool, String> {
    value
        .parse()
        .map_err(|_| "expected true or false".to_owned())
}

fn duration(value: &str) -> Result<SignedDuration, String> {
    parse_duration(value).map_err(|e| e.to_string())
}

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

/// Every configuration key this version knows.
pub fn known_keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter().map(|(key, _)| *key)
}

/// `sutra.instance.claim-timeout` → `SUTRA_INSTANCE_CLAIM_TIMEOUT`.
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
mod tests;
