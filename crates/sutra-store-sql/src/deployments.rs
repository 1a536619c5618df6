//! The deploy script: version n+1 of a deployment becomes active, the previous one draining.

use sutra_store::{DeploymentRecord, Result};

use crate::statements::{Backend, DeploymentStatements, LockOn, Scope, Statements};

pub async fn deploy<B: Backend>(
    backend: &B,
    tenant: &str,
    name: &str,
    source: &str,
) -> Result<DeploymentRecord> {
    let mut tx = backend.begin(Scope::Tenant(tenant)).await?;
    // Two deploys of one name would both read version n and both insert n+1.
    tx.serialize(&[LockOn::Deployment { tenant, name }]).await?;
    tx.drain_active(tenant, name).await?;
    let row = tx.insert_version(tenant, name, source).await?;
    tx.announce_deployment().await?;
    tx.commit().await?;
    row.decode()
}
