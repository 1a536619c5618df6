//! `GET /v1/leases` (SPEC §4, §6): who leads which singleton role. The items are the lease rows
//! the fleet shares, whichever replica answers; `replica` and `leading` add what the answering
//! replica itself believes it leads now, which is what an operator checks a replica against (and
//! what tests check "one leader per role" with).
//!
//! Leases are the fleet's, not a tenant's, but a `channel:{tenant}:{channel}` role names a
//! tenant's channel: an administrator sees the fleet's roles and its own tenant's channel roles,
//! never another tenant's; the operator (and a server without tokens) sees every role (decision
//! 0076).

use axum::Json;
use axum::extract::{Extension, State};
use sutra_engine::leadership::channel_role_tenant;
use sutra_wire::{Extra, Leases};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;
use crate::auth::Viewer;
use crate::openapi::ServerFailures;
use crate::problem::Problem;
use crate::render;

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new().routes(routes!(list))
}

/// Lists the leases
///
/// Who leads which singleton role (SPEC §6): the fleet's lease rows, and the roles the answering
/// replica leads as it sees it. A token with the `admin` role is not shown another tenant's
/// channel roles; one with the `operator` role sees every role.
#[utoipa::path(
    get,
    path = "/v1/leases",
    operation_id = "leases",
    responses(
        (status = 200, description = "The leases", body = Leases),
        ServerFailures,
    ),
)]
async fn list(
    State(api): State<Api>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Json<Leases>, Problem> {
    let shown = |role: &str| shown_to(role, &viewer);
    let leases = api.engine.store().leases().await.map_err(Problem::read)?;
    let items = leases
        .iter()
        .filter(|lease| shown(&lease.role))
        .map(render::lease)
        .collect();
    let leading: Vec<String> = api
        .engine
        .leadership()
        .roles()
        .into_iter()
        .filter(|(role, term)| term.is_some() && shown(role))
        .map(|(role, _)| role)
        .collect();
    Ok(Json(Leases {
        items,
        next: None,
        replica: api.engine.config().replica_id.clone(),
        leading,
        extra: Extra::new(),
    }))
}

/// Every role but, for a tenant's viewer, another tenant's channel roles.
fn shown_to(role: &str, viewer: &Viewer) -> bool {
    match (viewer.tenant(), channel_role_tenant(role)) {
        (Some(tenant), Some(owner)) => owner == tenant,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::shown_to;
    use crate::auth::Viewer;

    #[test]
    fn an_administrator_sees_the_fleets_roles_and_only_its_own_tenants_channels() {
        let acme = Viewer::Tenant("acme".to_owned());
        assert!(shown_to("timers", &acme));
        assert!(shown_to("channel:acme:orders", &acme));
        assert!(!shown_to("channel:globex:orders", &acme));
        assert!(!shown_to("channel:acme-eu:orders", &acme));
    }

    #[test]
    fn the_operator_sees_every_role() {
        for role in ["timers", "channel:acme:orders", "channel:globex:orders"] {
            assert!(shown_to(role, &Viewer::Fleet), "{role}");
        }
    }
}
