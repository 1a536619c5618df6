//! Deployments on this replica (SPEC §6, §7.1): checking and storing a new version, and the
//! one activation path every version takes — made here or through another replica
//! (`converge`) — which flips every lane before intake routes by it.

use std::sync::Arc;

use jiff::SignedDuration;
use sutra_core::check;
use sutra_core::diagnostic::{Diagnostic, Span};
use sutra_core::model::{Deployment, Transport};
use sutra_store::{DeploymentRecord, DeploymentStatus};
use tracing::{info, warn};

use crate::error::Error;
use crate::lane::Lanes;
use crate::leadership::{Leadership, channel_role};
use crate::registry::{Current, Live};
use crate::shared::Shared;

/// What a deployment produced.
#[derive(Debug)]
pub struct Deployed {
    pub record: DeploymentRecord,
    /// Warnings of the checker (the deployment was accepted).
    pub warnings: Vec<Diagnostic>,
}

#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("the deployment is invalid")]
    Invalid(Vec<Diagnostic>),
    /// The document names a tenant other than the one deploying it.
    #[error("the document is for tenant `{named}`, and tenant `{deployer}` is deploying it")]
    OtherTenant { named: String, deployer: String },
    #[error(transparent)]
    Engine(#[from] Error),
}

/// This replica's deployments: the live set intake routes by, and the one path that changes it.
pub(crate) struct Deployments {
    shared: Arc<Shared>,
    lanes: Arc<Lanes>,
    leadership: Arc<dyn Leadership>,
    live: Arc<Current>,
    /// Serializes deployments on this replica so that two activations never interleave.
    deploying: tokio::sync::Mutex<()>,
}

impl Deployments {
    pub(crate) fn new(
        shared: Arc<Shared>,
        lanes: Arc<Lanes>,
        leadership: Arc<dyn Leadership>,
        live: Arc<Current>,
    ) -> Deployments {
        Deployments {
            shared,
            lanes,
            leadership,
            live,
            deploying: tokio::sync::Mutex::new(()),
        }
    }

    /// Checks, stores and activates a deployment for `tenant`: version n+1 becomes active on every
    /// lane before intake routes to it. A document naming a tenant must name `tenant`.
    pub(crate) async fn deploy(&self, tenant: &str, source: &str) -> Result<Deployed, DeployError> {
        let _one_at_a_time = self.deploying.lock().await;
        let checked = check::check(source);
        let (errors, warnings): (Vec<_>, Vec<_>) = checked
            .diagnostics
            .into_iter()
            .partition(Diagnostic::is_error);
        let Some(deployment) = checked.deployment.filter(|_| errors.is_empty()) else {
            return Err(DeployError::Invalid(errors));
        };
        if let Some(named) = deployment
            .tenant
            .as_deref()
            .filter(|named| *named != tenant)
        {
            return Err(DeployError::OtherTenant {
                named: named.to_owned(),
                deployer: tenant.to_owned(),
            });
        }
        let mut refused = channel_conflicts(&self.live.get(), tenant, &deployment);
        refused.extend(brokers_missing(&self.shared.config.brokers, &deployment));
        refused.extend(reminders_too_frequent(
            self.shared.config.remind_min_every,
            &deployment,
        ));
        refused.extend(schedules_too_dense(
            self.shared.config.schedule_max_ticks_per_minute,
            &deployment,
        ));
        if !refused.is_empty() {
            return Err(DeployError::Invalid(refused));
        }
        let record = self
            .shared
            .store
            .deploy(tenant, &deployment.name, source)
            .await
            .map_err(Error::from)?;
        self.activate(vec![(record.clone(), deployment)]).await?;
        Ok(Deployed { record, warnings })
    }

    /// Adds stored `versions` to the live set: every lane flips to it before intake routes by it,
    /// so that no step sees half a deployment (SPEC §6), and the singleton channels the versions
    /// declare are contended for from now on, and their flows' step series exported at zero. The
    /// one activation path, for deployments made here and those made through other replicas;
    /// callers hold `deploying`, so that two activations never interleave.
    async fn activate(&self, versions: Vec<(DeploymentRecord, Deployment)>) -> Result<(), Error> {
        contend_for_singleton_channels(self.leadership.as_ref(), &versions);
        self.shared.metrics.deployed(&versions);
        let live = Arc::new(self.live.get().with(versions));
        self.lanes.activate(&live).await;
        self.live.set(live);
        self.shared.schedules_changed.notify_one();
        Ok(())
    }

    /// Activates every stored version not loaded here: those deployed through other replicas.
    pub(crate) async fn load_missing(&self) -> Result<(), Error> {
        let _one_at_a_time = self.deploying.lock().await;
        let live = self.live.get();
        let stored = self.shared.store.deployments(None).await?;
        let missing: Vec<_> = loadable(stored)
            .into_iter()
            .filter(|(record, _)| !live.contains(record))
            .collect();
        if !missing.is_empty() {
            let versions: Vec<String> = missing
                .iter()
                .map(|(record, _)| format!("{}/{} v{}", record.tenant, record.name, record.version))
                .collect();
            info!(
                ?versions,
                "activating deployments made through other replicas"
            );
            self.activate(missing).await?;
        }
        Ok(())
    }
}

/// A channel name belongs to one deployment per tenant: intake routes by channel alone.
fn channel_conflicts(live: &Live, tenant: &str, deployment: &Deployment) -> Vec<Diagnostic> {
    deployment
        .channels
        .keys()
        .filter_map(|channel| {
            let owner = live.channel_owner(tenant, channel, &deployment.name)?;
            Some(Diagnostic::error(
                "channel-taken",
                Span::default(),
                format!("channel `{channel}` is already declared by deployment `{owner}`"),
            )
            .with_hint("channel names are unique per tenant: rename the channel, or deploy it as part of that deployment"))
        })
        .collect()
}

/// A broker channel needs its broker: without a URL for it this replica could neither consume
/// the channel nor publish to it, and the deployment would check, deploy and never move.
fn brokers_missing(configured: &[Transport], deployment: &Deployment) -> Vec<Diagnostic> {
    deployment
        .channels
        .values()
        .filter(|channel| {
            channel.transport != Transport::Http && !configured.contains(&channel.transport)
        })
        .map(|channel| {
            let transport = channel.transport.name();
            Diagnostic::error(
                "broker-not-configured",
                Span::default(),
                format!(
                    "channel `{}` is a {transport} channel, and this replica has no {transport} broker",
                    channel.name
                ),
            )
            .with_hint(format!(
                "set sutra.transports.{transport}.url (SUTRA_TRANSPORTS_{}_URL) on every replica, then deploy again",
                transport.to_uppercase()
            ))
        })
        .collect()
}

/// A deployment whose schedules together tick more often than `max_per_minute`: one replica leads
/// the scheduler and fires ticks one at a time, so a document of thousands of flows ticking each
/// second would be accepted and then fall behind, every schedule late (issue 48). Refused at
/// deploy, where the author can spread the schedules out or an operator raise the bound.
fn schedules_too_dense(max_per_minute: u32, deployment: &Deployment) -> Option<Diagnostic> {
    let scheduled: Vec<_> = (deployment.flows.values())
        .filter_map(|flow| flow.schedule())
        .collect();
    let per_minute: f64 = scheduled.iter().map(|s| s.when.ticks_per_minute()).sum();
    (per_minute > f64::from(max_per_minute)).then(|| {
        Diagnostic::error(
            "schedules-too-dense",
            Span::default(),
            format!(
                "the deployment's {} schedules tick {per_minute:.0} times a minute together, \
                 more than the {max_per_minute} this engine fires for one deployment",
                scheduled.len()
            ),
        )
        .with_hint(
            "schedule fewer flows or less often (a longer `every`, a sparser cron), or raise \
             sutra.schedules.max-ticks-per-minute (SUTRA_SCHEDULES_MAX_TICKS_PER_MINUTE) on \
             every replica",
        )
    })
}

/// Each reminder of the deployment repeating more often than `floor`: each is a step and a row
/// of history, and the language's own floor of a second may be more than an operator's fleet
/// should carry for every waiting instance (issue 48). Refused at deploy, naming the node.
fn reminders_too_frequent(floor: SignedDuration, deployment: &Deployment) -> Vec<Diagnostic> {
    let mut refused = Vec::new();
    for (flow_name, flow) in &deployment.flows {
        for node in &flow.nodes {
            let Some(every) = node.remind.as_ref().and_then(|remind| remind.every) else {
                continue;
            };
            if every < floor {
                refused.push(
                    Diagnostic::error(
                        "remind-too-frequent",
                        Span::default(),
                        format!(
                            "the `remind` of node `{}` in flow `{flow_name}` repeats every \
                             {every}, more often than the {floor} this engine allows",
                            node.id
                        ),
                    )
                    .with_hint(format!(
                        "write `every: {floor}` or longer, or lower sutra.remind.min-every \
                         (SUTRA_REMIND_MIN_EVERY) on every replica, down to PT1S"
                    )),
                );
            }
        }
    }
    refused
}

/// Every non-retired version of `records` with its checked definition. A version that no longer
/// checks (written by a newer build, or edited by hand) is skipped loudly rather than stopping
/// the replica.
pub(crate) fn loadable(records: Vec<DeploymentRecord>) -> Vec<(DeploymentRecord, Deployment)> {
    records
        .into_iter()
        .filter(|record| record.status != DeploymentStatus::Retired)
        .filter_map(|record| match check::check(&record.source).deployment {
            Some(deployment) => Some((record, deployment)),
            None => {
                warn!(deployment = %record.name, version = record.version, "stored deployment no longer checks; skipped");
                None
            }
        })
        .collect()
}

/// Registers the role of every channel of `versions` declared `singleton: true` (SPEC §6: on
/// first need); the channel's consumer runs while this replica holds it.
pub(crate) fn contend_for_singleton_channels(
    leadership: &dyn Leadership,
    versions: &[(DeploymentRecord, Deployment)],
) {
    for (record, deployment) in versions {
        for (name, channel) in &deployment.channels {
            if channel.singleton {
                leadership.role(&channel_role(&record.tenant, name));
            }
        }
    }
}
