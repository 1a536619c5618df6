//! Who is calling (SPEC §4): a gate in front of each group of routes turns the request's bearer
//! token into a [`Caller`] — the tenant every handler then acts for — or refuses it.
//!
//! Authentication and the role check happen here, once, before any handler runs, so a handler
//! cannot forget them; handlers only read the caller's tenant, and pass it to the engine and the
//! store on every call. The operator views read a [`Viewer`] instead: one tenant's figures for a
//! tenant's administrator, the fleet's for the operator (decision 0076). Without configured
//! tokens (which only a loopback listener allows) every request acts for tenant `default` with
//! every role, the operator's included, as a single-user embedded engine should. The presented
//! token is never logged or echoed: refusals say what was missing, not what came.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sutra_core::codes;
use tracing::debug;

use crate::problem::Problem;
use crate::tokens::{Grant, Keyring, Role};

/// The tenant of every request on a server without tokens (SPEC §1).
const DEFAULT_TENANT: &str = "default";

/// The caller of an admitted request: the tenant whose rows it may read and write.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: String,
}

/// Whose figures an operator view shows — the scaling signal, the pulse, the leases — to the
/// request that asks (decision 0076).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// Every tenant's: the operator's token, or a server without tokens.
    Fleet,
    /// This tenant's alone: its administrator's token.
    Tenant(String),
}

impl Viewer {
    /// The tenant whose figures alone are shown; `None` for the fleet's.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Viewer::Fleet => None,
            Viewer::Tenant(tenant) => Some(tenant),
        }
    }
}

/// Who an admitted request acts for: a tenant (none for the operator, who acts for no tenant),
/// and whose figures it sees.
struct Admitted {
    caller: Option<Caller>,
    viewer: Viewer,
}

/// Admits requests whose token grants one of the roles `admits`.
#[derive(Clone)]
pub struct Gate {
    tokens: Option<Arc<Keyring>>,
    admits: &'static [Role],
}

impl Gate {
    pub fn new(tokens: Option<Arc<Keyring>>, admits: &'static [Role]) -> Gate {
        Gate { tokens, admits }
    }

    fn admit(&self, headers: &HeaderMap) -> Result<Admitted, Refusal> {
        let Some(keyring) = &self.tokens else {
            return Ok(Admitted {
                caller: Some(Caller {
                    tenant: DEFAULT_TENANT.to_owned(),
                }),
                viewer: Viewer::Fleet,
            });
        };
        let tokens = keyring.current();
        let presented = bearer(headers)?;
        let grant = tokens.verify(presented).ok_or(Refusal::UnknownToken)?;
        if !self.admits.iter().any(|role| grant.roles.contains(role)) {
            return Err(Refusal::forbidden(self.admits, grant));
        }
        Ok(match &grant.tenant {
            Some(tenant) => Admitted {
                caller: Some(Caller {
                    tenant: tenant.clone(),
                }),
                viewer: Viewer::Tenant(tenant.clone()),
            },
            None => Admitted {
                caller: None,
                viewer: Viewer::Fleet,
            },
        })
    }
}

/// The middleware: puts the [`Caller`] (when the request acts for a tenant) and the [`Viewer`]
/// in the request's extensions, or answers 401 or 403.
pub async fn admit(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    match gate.admit(request.headers()) {
        Ok(Admitted { caller, viewer }) => {
            let extensions = request.extensions_mut();
            if let Some(caller) = caller {
                extensions.insert(caller);
            }
            extensions.insert(viewer);
            next.run(request).await
        }
        Err(refusal) => refusal.into_response(),
    }
}

/// Why a request is not admitted.
enum Refusal {
    /// No `Authorization` header, or not a bearer token.
    NoToken,
    /// A bearer token that is none of the configured ones.
    UnknownToken,
    /// A token without the role the call needs; the detail says which.
    Forbidden(String),
}

impl Refusal {
    fn forbidden(admits: &[Role], grant: &Grant) -> Refusal {
        let needed: Vec<String> = admits
            .iter()
            .map(|role| format!("`{}`", role.as_str()))
            .collect();
        let needed = needed.join(" or ");
        let held: Vec<&str> = grant.roles.iter().map(|role| role.as_str()).collect();
        let held = held.join(", ");
        let holder = match &grant.tenant {
            Some(tenant) => format!("tenant `{tenant}`"),
            None => "no tenant".to_owned(),
        };
        debug!(%holder, %needed, "request refused: forbidden");
        Refusal::Forbidden(format!(
            "this call needs the {needed} role; the token ({holder}) has {held}"
        ))
    }
}

/// The token of `Authorization: Bearer TOKEN` (the scheme in any case, RFC 9110).
fn bearer(headers: &HeaderMap) -> Result<&str, Refusal> {
    let value = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .ok_or(Refusal::NoToken)?;
    let (scheme, token) = value.split_once(' ').ok_or(Refusal::NoToken)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Refusal::NoToken);
    }
    Ok(token.trim())
}

impl IntoResponse for Refusal {
    /// 403, or 401 with the challenge RFC 6750 asks for, telling a client with no token apart
    /// from one whose token is not accepted.
    fn into_response(self) -> Response {
        let (detail, challenge) = match self {
            Refusal::Forbidden(detail) => {
                return Problem::new(codes::AUTH_FORBIDDEN, detail).into_response();
            }
            Refusal::NoToken => (
                "this server requires an API token: send `Authorization: Bearer <token>`",
                r#"Bearer realm="sutra""#,
            ),
            Refusal::UnknownToken => (
                "the bearer token is not one this server accepts",
                r#"Bearer realm="sutra", error="invalid_token""#,
            ),
        };
        debug!(detail, "request refused: unauthenticated");
        let mut response = Problem::new(codes::AUTH_UNAUTHENTICATED, detail).into_response();
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
        response
    }
}
