//! The live deployment set: every active and draining version a replica can run, and the
//! channel routing that intake uses.
//!
//! A channel routes to the active version that declares it. A channel the active version no
//! longer declares still routes to the newest draining version that does, for the correlation
//! tail of the instances pinned to it (a reply to one of them still arrives), but starts no
//! instance: only an active version starts.
//!
//! A `Live` value is immutable. Activation builds a new one and swaps it in (each lane holds its
//! own `Arc<Live>`, flipped by an activation request in its queue, so no step ever sees half a
//! deployment). Instances are pinned to `(tenant, deployment, version)`; a draining version
//! stays here for as long as it is not retired, so its instances keep resuming on the
//! definition they started under.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use sutra_core::model::{Channel, Deployment, Flow, Transport};
use sutra_core::snapshot::InstanceInfo;
use sutra_store::{DeploymentRecord, DeploymentStatus};

type VersionKey = (String, String, u32);

#[derive(Default)]
pub struct Live {
    versions: HashMap<VersionKey, Arc<Deployment>>,
    /// (tenant, deployment name) → the active version.
    active: HashMap<(String, String), u32>,
    /// (tenant, channel) → the deployment name that declares it (in its active version).
    channels: HashMap<(String, String), String>,
    /// (tenant, channel) → the draining version that still declares a channel its deployment's
    /// active version dropped: (deployment name, version).
    tails: HashMap<(String, String), (String, u32)>,
}

/// The intake-side view of the live set; lanes hold their own, flipped in their queues. It is
/// swapped only once every lane has flipped.
pub(crate) struct Current(RwLock<Arc<Live>>);

impl Current {
    pub(crate) fn new(live: Arc<Live>) -> Current {
        Current(RwLock::new(live))
    }

    pub(crate) fn get(&self) -> Arc<Live> {
        Arc::clone(&self.0.read().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) fn set(&self, live: Arc<Live>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = live;
    }
}

/// A channel as intake sees it: its definition and the deployment version that owns it.
pub struct ChannelRoute {
    pub deployment: Arc<Deployment>,
    pub version: u32,
    /// Whether the version is active: only then do messages on the channel start instances.
    pub starts: bool,
}

impl ChannelRoute {
    pub fn channel(&self, name: &str) -> &Channel {
        &self.deployment.channels[name]
    }
}

impl Live {
    /// This set with checked deployment versions added, in order. An active version replaces
    /// the previous active one for routing; the previous one stays loaded (draining).
    pub fn with(&self, versions: Vec<(DeploymentRecord, Deployment)>) -> Live {
        let mut next = Live {
            versions: self.versions.clone(),
            active: self.active.clone(),
            channels: self.channels.clone(),
            tails: self.tails.clone(),
        };
        for (record, deployment) in versions {
            next.insert(&record, deployment);
        }
        next
    }

    /// Whether the version `record` names is loaded.
    pub fn contains(&self, record: &DeploymentRecord) -> bool {
        self.version(&record.tenant, &record.name, record.version)
            .is_some()
    }

    fn insert(&mut self, record: &DeploymentRecord, deployment: Deployment) {
        let tenant = record.tenant.clone();
        if record.status == DeploymentStatus::Active {
            self.keep_tails(&tenant, &record.name, &deployment);
            self.channels
                .retain(|(t, _), name| !(t == &tenant && name == &record.name));
            for channel in deployment.channels.keys() {
                let key = (tenant.clone(), channel.clone());
                self.tails.remove(&key);
                self.channels.insert(key, record.name.clone());
            }
            self.active
                .insert((tenant.clone(), record.name.clone()), record.version);
        }
        self.versions.insert(
            (tenant, record.name.clone(), record.version),
            Arc::new(deployment),
        );
    }

    /// Before `next` becomes the active version of `name`: the channels the version it replaces
    /// declares and `next` does not keep routing to that version, now draining.
    fn keep_tails(&mut self, tenant: &str, name: &str, next: &Deployment) {
        let Some(&previous) = self.active.get(&(tenant.to_owned(), name.to_owned())) else {
            return;
        };
        let Some(draining) = self.version(tenant, name, previous).cloned() else {
            return;
        };
        for channel in draining.channels.keys() {
            if !next.channels.contains_key(channel) {
                let key = (tenant.to_owned(), channel.clone());
                self.tails.insert(key, (name.to_owned(), previous));
            }
        }
    }

    /// The definition an instance is pinned to.
    pub fn pinned(&self, instance: &InstanceInfo) -> Option<(Arc<Deployment>, &Flow)> {
        let deployment = self.version(&instance.tenant, &instance.deployment, instance.version)?;
        let flow = deployment.flows.get(&instance.flow)?;
        Some((Arc::clone(deployment), flow))
    }

    /// A channel as a loaded (active or draining) deployment version defines it: an outbox row
    /// is sent as the version that minted it says, whatever was deployed since.
    pub fn channel(
        &self,
        tenant: &str,
        deployment: &str,
        version: u32,
        name: &str,
    ) -> Option<&Channel> {
        self.version(tenant, deployment, version)?
            .channels
            .get(name)
    }

    /// Every active version: tenant, deployment name, version and its definition.
    pub fn active(&self) -> impl Iterator<Item = (&str, &str, u32, &Deployment)> {
        self.active.iter().filter_map(|((tenant, name), &version)| {
            let deployment = self.version(tenant, name, version)?;
            Some((tenant.as_str(), name.as_str(), version, deployment.as_ref()))
        })
    }

    /// A loaded version, active or draining.
    pub fn loaded(&self, tenant: &str, name: &str, version: u32) -> Option<&Arc<Deployment>> {
        self.version(tenant, name, version)
    }

    fn version(&self, tenant: &str, name: &str, version: u32) -> Option<&Arc<Deployment>> {
        self.versions
            .get(&(tenant.to_owned(), name.to_owned(), version))
    }

    /// The active deployment version that declares `channel` for `tenant`, else the draining
    /// one that still does (which starts nothing).
    pub fn route(&self, tenant: &str, channel: &str) -> Option<ChannelRoute> {
        let key = (tenant.to_owned(), channel.to_owned());
        let (name, version, starts) = match self.channels.get(&key) {
            Some(name) => (name, self.active[&(tenant.to_owned(), name.clone())], true),
            None => {
                let (name, version) = self.tails.get(&key)?;
                (name, *version, false)
            }
        };
        let deployment = Arc::clone(self.version(tenant, name, version)?);
        Some(ChannelRoute {
            deployment,
            version,
            starts,
        })
    }

    /// Every channel whose messages come in by a broker — of an active version, or the tail a
    /// draining version keeps — with its tenant and the name of the deployment that declares
    /// it: what this replica's broker consumers read. An `http` channel comes in by the HTTP
    /// server instead.
    pub fn consumed_broker_channels(&self) -> impl Iterator<Item = (&str, &str, &Channel)> {
        let active = self.channels.iter().filter_map(|(key, name)| {
            let version = self.active.get(&(key.0.clone(), name.clone()))?;
            Some((key, name, *version))
        });
        let tails = self
            .tails
            .iter()
            .map(|(key, (name, version))| (key, name, *version));
        active
            .chain(tails)
            .filter_map(|((tenant, channel), name, version)| {
                let deployment = self.version(tenant, name, version)?;
                let definition = deployment.channels.get(channel)?;
                (definition.transport != Transport::Http && deployment.consumes(channel))
                    .then_some((tenant.as_str(), name.as_str(), definition))
            })
    }

    /// The deployment (other than `name`) whose active version already declares `channel`.
    pub fn channel_owner(&self, tenant: &str, channel: &str, name: &str) -> Option<&str> {
        self.channels
            .get(&(tenant.to_owned(), channel.to_owned()))
            .map(String::as_str)
            .filter(|owner| *owner != name)
    }

    pub fn active_version(&self, tenant: &str, name: &str) -> Option<u32> {
        self.active
            .get(&(tenant.to_owned(), name.to_owned()))
            .copied()
    }
}
