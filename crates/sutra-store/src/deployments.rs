//! Deployments: the stored versions of each deployment, and how a process learns that another
//! stored one.

use jiff::{SignedDuration, Timestamp};

use crate::Result;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentRecord {
    pub tenant: String,
    pub name: String,
    pub version: u32,
    pub status: DeploymentStatus,
    pub source: String,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentStatus {
    Active,
    Draining,
    Retired,
}

impl DeploymentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentStatus::Active => "active",
            DeploymentStatus::Draining => "draining",
            DeploymentStatus::Retired => "retired",
        }
    }

    pub fn parse(text: &str) -> Option<DeploymentStatus> {
        [
            DeploymentStatus::Active,
            DeploymentStatus::Draining,
            DeploymentStatus::Retired,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// What keeps a draining version from retiring (SPEC §7.3), counted in the database so that
/// every replica answers alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retirement {
    /// Instances pinned to the version that have not ended: created (a called child not started
    /// yet), suspended, and failed (restorable).
    pub instances: u64,
    /// Outbox rows it minted that are neither sent nor poisoned.
    pub outbox: u64,
    /// Tasks of its instances still available or locked.
    pub tasks: u64,
}

impl Retirement {
    /// Whether nothing keeps the version: the gate's three legs hold.
    pub fn clear(&self) -> bool {
        *self == Retirement::default()
    }
}

/// Storing deployment versions and noticing new ones.
#[async_trait::async_trait]
pub trait Deployments: Send + Sync {
    /// Stores `source` as version n+1 of `name`; the previously active version becomes draining.
    async fn deploy(&self, tenant: &str, name: &str, source: &str) -> Result<DeploymentRecord>;

    /// Every version of every deployment of the tenant (all tenants when `None`), oldest first.
    async fn deployments(&self, tenant: Option<&str>) -> Result<Vec<DeploymentRecord>>;

    /// What keeps version `version` of `name` from retiring.
    async fn retirement(&self, tenant: &str, name: &str, version: u32) -> Result<Retirement>;

    /// Retires every draining version, of every tenant, that nothing keeps (the three-legged
    /// gate, each version's check and its retirement one statement) and whose successor was
    /// stored at least `grace` ago; returns those it retired. The grace covers a replica that
    /// has not loaded the successor yet and so may still start an instance on the version.
    async fn retire_drained(&self, grace: SignedDuration) -> Result<Vec<DeploymentRecord>>;

    /// How many deployment versions are stored, of every tenant. Versions are never deleted (a
    /// retired one keeps its row), so this grows with every deploy: a process whose count
    /// differs from the one it last loaded has versions to load.
    async fn deployment_revision(&self) -> Result<u64>;

    /// Waits until another process may have stored a deployment version, so that this one loads it
    /// at once rather than at its next look at [`Deployments::deployment_revision`]. It also
    /// returns when it starts (or starts again) to listen, since what was stored before was
    /// announced to no one here. A store that cannot tell never returns. An error means a notice
    /// may have been missed: look at the revision anyway, and wait a while before asking again.
    async fn deployment_notice(&self) -> Result<()> {
        std::future::pending().await
    }
}
