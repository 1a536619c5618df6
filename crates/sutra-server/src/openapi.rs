//! The OpenAPI 3.1 document of the HTTP API (SPEC §4, decision 0033), served open at
//! `GET /openapi.json`.
//!
//! Each handler's `#[utoipa::path]`, beside it, says what its route takes and answers, over
//! sutra-wire's own types (its `openapi` feature): the schemas are the types the server writes,
//! so the bodies cannot drift from them. The statuses a route answers are listed by hand, and
//! `.ci/openapi` holds them to a live server with a schema-driven fuzzer. What a layer does to
//! every route it wraps is written down once for all of them: [`gated`] for a role's gate,
//! [`document`] for the refusal of `%00` that `http::router` puts in front of every route. A
//! refusal is one of the shared responses below, each naming the codes of its status from
//! `sutra_core::codes`, the table the answers themselves take their status from; the 500 and 503
//! that every route reaching the store or the engine answers are one [`ServerFailures`].

use std::collections::BTreeMap;

use axum::Extension;
use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use sutra_core::codes;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::schema::{
    AdditionalProperties, AllOfBuilder, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema,
    SchemaType, Type,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{
    Components, ContentBuilder, HeaderBuilder, InfoBuilder, LicenseBuilder, OpenApi,
    OpenApiBuilder, Ref, RefOr, Response, ResponseBuilder,
};
use utoipa::{IntoResponses, PartialSchema, ToResponse, ToSchema};

use crate::tokens::Role;

/// The rendered document, shared by every request for it.
#[derive(Clone)]
pub struct Document(Bytes);

/// The API's own description
///
/// This document. It holds nothing of any tenant, so it is served without a token.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object)),
)]
pub(crate) async fn serve(Extension(document): Extension<Document>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document.0)
}

/// A CloudEvents 1.0 event in structured mode, as intake reads it
/// (`sutra_core::cloud_event::structured`): the type only names the schema, since intake
/// decodes the event by hand, by the rules every transport shares.
pub(crate) struct CloudEvent;

impl PartialSchema for CloudEvent {
    fn schema() -> RefOr<Schema> {
        let typed = |types: SchemaType, description: &str| {
            ObjectBuilder::new()
                .schema_type(types)
                .description(Some(description))
        };
        let text = |description: &str| typed(Type::String.into(), description);
        let optional_text = |description: &str| {
            typed(
                SchemaType::from_iter([Type::String, Type::Null]),
                description,
            )
        };
        ObjectBuilder::new()
            .property(
                "specversion",
                text("The CloudEvents version.").enum_values(Some(["1.0"])),
            )
            .property("id", text("The deduplication key.").min_length(Some(1)))
            .property("type", text("The event's type.").min_length(Some(1)))
            .property("source", text("Where it comes from.").min_length(Some(1)))
            .property("subject", optional_text("Optional."))
            .property("time", optional_text("Optional; RFC 3339."))
            .property(
                "data",
                ObjectBuilder::new()
                    .schema_type(SchemaType::AnyValue)
                    .description(Some("The message, JSON: what the channel's schema checks.")),
            )
            .required("specversion")
            .required("id")
            .required("type")
            .required("source")
            .into()
    }
}

impl ToSchema for CloudEvent {}

/// A deployment document (SPEC §3), as `POST /v1/deployments` reads its YAML: a map of these
/// four members. What a flow may hold is the checker's to say, with every error located
/// (`SUTRA.DEPLOY.INVALID`); the schema says the document's shape and gives a whole one as its
/// example, which a client can send as it is.
pub(crate) struct DeploymentDocument;

impl PartialSchema for DeploymentDocument {
    fn schema() -> RefOr<Schema> {
        let name = |description: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[a-z0-9][a-z0-9-]{0,62}$"))
                .description(Some(description))
        };
        let map = |description: &str| {
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some(description))
        };
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "name",
                name("The deployment's name; each deploy of it is a version."),
            )
            .property("tenant", name("The tenant it belongs to: the caller's."))
            .property("channels", map("The channels, by name."))
            .property(
                "flows",
                map("The flows, by name: at least one.").min_properties(Some(1)),
            )
            .required("name")
            .required("flows")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .examples([serde_json::json!({
                "name": "greetings",
                "channels": {"greetings": {"transport": "http"}},
                "flows": {"greet": {
                    "start": {"channel": "greetings"},
                    "nodes": [{
                        "id": "done",
                        "end": {"reply": {"greeting": "= 'hello ' + string(vars.input.name)"}},
                    }],
                }},
            })])
            .into()
    }
}

impl ToSchema for DeploymentDocument {}

/// The name of the bearer token scheme in `components.securitySchemes`.
const BEARER: &str = "bearer";

/// The media type of every refusal.
const PROBLEM_JSON: &str = "application/problem+json";

/// The tag of the routes no gate guards.
const OPEN: &str = "open";

/// The tag of the operator views, which a tenant's administrator and the operator both read.
pub const VIEWS: &str = "views";

/// The document of the whole API from the parts of its route groups: the parts' paths and
/// schemas, the shared refusals, the security scheme, and the `%00` refusal every route can
/// answer. Rendered once, pretty-printed: it is what `docs/openapi.json` holds.
pub fn document(parts: impl IntoIterator<Item = OpenApi>) -> Document {
    let mut document = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Sutra")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(DESCRIPTION))
                .license(Some(
                    LicenseBuilder::new()
                        .name(env!("CARGO_PKG_LICENSE"))
                        .identifier(Some(env!("CARGO_PKG_LICENSE")))
                        .build(),
                ))
                .build(),
        )
        .tags(Some(tags()))
        .build();
    for part in parts {
        document.merge(part);
    }
    let components = document.components.get_or_insert_with(Components::default);
    components.responses.extend(refusals());
    components.security_schemes.insert(
        BEARER.to_owned(),
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "An API token from `sutra.auth.tokens`, bound to one tenant and a set of \
                     roles, or the operator's, bound to no tenant. A server without tokens \
                     (loopback only) takes every request without one, for tenant `default` \
                     with every role, the operator's included.",
                ))
                .build(),
        ),
    );
    describe_problem_members(components);
    pair_bulk_actions(components);
    for operation in operations(&mut document) {
        // `%00` anywhere in the URL is refused before any route reads it (`http::router`).
        operation
            .responses
            .responses
            .entry("400".to_owned())
            .or_insert_with(refusal::<BadRequest>);
    }
    let rendered = document
        .to_pretty_json()
        .expect("the document is plain data whose every map key is a string");
    Document(Bytes::from(rendered))
}

const DESCRIPTION: &str = "The HTTP API of Sutra, a durable process engine (docs/spec.md §4). \
Every refusal is `application/problem+json` with a stable `code`; docs/errors.md says what each \
asks of the caller. Answers may gain members in later versions, and never lose or rename one. \
No string of a request, in its URL or its body, may hold the character U+0000 (`\\u0000`), which \
no store can keep: such a request is refused, `SUTRA.API.REQUEST.INVALID` (a message's, \
`SUTRA.INTAKE.VALIDATION`).";

/// One tag per tenant role a gate admits, one for the operator views, and one for the open
/// routes.
fn tags() -> Vec<utoipa::openapi::Tag> {
    let tag = |name: &str, description: &str| {
        TagBuilder::new()
            .name(name)
            .description(Some(description))
            .build()
    };
    vec![
        tag(
            Role::Sender.as_str(),
            "Sending messages; a token with the `sender` role.",
        ),
        tag(
            Role::Worker.as_str(),
            "Pulling and answering tasks; a token with the `worker` role.",
        ),
        tag(
            Role::Admin.as_str(),
            "Deployments, instances and schedules; a token with the `admin` role.",
        ),
        tag(
            VIEWS,
            "The operator views — the scaling signal, the last fifteen minutes, the leases: a \
             token with the `operator` role sees every tenant's figures, one with the `admin` \
             role its own tenant's alone.",
        ),
        tag(
            OPEN,
            "Probes, metrics and this document: no token (`/metrics` takes the operator's \
             when `sutra.metrics.tenant-labels` is on).",
        ),
    ]
}

/// Marks every operation of a group that a gate guards: its tag (the role it admits, or
/// [`VIEWS`]), the bearer token it takes (or none, on a server without tokens), and the gate's
/// two refusals.
pub fn gated(part: &mut OpenApi, tag: &str) {
    for operation in operations(part) {
        operation.tags = Some(vec![tag.to_owned()]);
        // The empty requirement: a server without tokens asks for none.
        operation.security = Some(vec![
            SecurityRequirement::new(BEARER, Vec::<String>::new()),
            SecurityRequirement::default(),
        ]);
        let responses = &mut operation.responses.responses;
        responses.insert("401".to_owned(), refusal::<Unauthenticated>());
        responses.insert("403".to_owned(), refusal::<Forbidden>());
    }
}

/// Marks every operation of the group no gate guards.
pub fn open(part: &mut OpenApi) {
    for operation in operations(part) {
        operation.tags = Some(vec![OPEN.to_owned()]);
    }
}

fn operations(document: &mut OpenApi) -> impl Iterator<Item = &mut Operation> {
    document.paths.paths.values_mut().flat_map(|item| {
        let PathItem {
            get,
            put,
            post,
            delete,
            options,
            head,
            patch,
            trace,
            ..
        } = item;
        [get, put, post, delete, options, head, patch, trace]
            .into_iter()
            .filter_map(Option::as_mut)
    })
}

/// A reference to the shared refusal `R`.
fn refusal<R: for<'r> ToResponse<'r>>() -> RefOr<Response> {
    RefOr::Ref(Ref::from_response_name(R::response().0))
}

/// The members a problem carries beside RFC 9457's and Sutra's: the wire type keeps them in a
/// map, so that a reader keeps what it does not know, and so they are named here.
fn describe_problem_members(components: &mut Components) {
    let Some(RefOr::T(Schema::Object(problem))) = components.schemas.get_mut("Problem") else {
        return;
    };
    let list_of = |name: &str, description: &str| {
        ArrayBuilder::new()
            .items(Ref::from_schema_name(name))
            .description(Some(description))
            .build()
    };
    problem.properties.insert(
        "violations".to_owned(),
        list_of(
            sutra_wire::Violation::name().as_ref(),
            "`SUTRA.INTAKE.VALIDATION`: every way the message's data fails its channel's schema.",
        )
        .into(),
    );
    problem.properties.insert(
        "diagnostics".to_owned(),
        list_of(
            sutra_wire::Diagnostic::name().as_ref(),
            "`SUTRA.DEPLOY.INVALID`: every error the checker found, located.",
        )
        .into(),
    );
    problem.properties.insert(
        "instance".to_owned(),
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "The instance the refusal is about, where one is (a held message's instance \
                 that failed or was cancelled).",
            ))
            .into(),
    );
    components.schemas.insert(
        sutra_wire::Violation::name().into_owned(),
        sutra_wire::Violation::schema(),
    );
}

/// A bulk call's `to_version` goes with `migrate` and with no other action
/// (`http::operations`): a rule across two members, which the body's type cannot say, so its
/// schema is joined here with the two combinations the server takes.
fn pair_bulk_actions(components: &mut Components) {
    let name = sutra_wire::BulkBody::name();
    let Some(body) = components.schemas.remove(name.as_ref()) else {
        return;
    };
    let action = |actions: &[&str]| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(actions.iter().copied()))
    };
    let migrate = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("action", action(&["migrate"]))
        .property(
            "to_version",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1)),
        )
        .required("to_version");
    let other = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("action", action(&["restore", "cancel"]))
        .property("to_version", ObjectBuilder::new().schema_type(Type::Null));
    let paired = AllOfBuilder::new()
        .item(body)
        .item(OneOfBuilder::new().item(migrate).item(other))
        .description(Some(
            "`migrate` with the version to move onto, or `restore` or `cancel` without one.",
        ));
    components.schemas.insert(name.into_owned(), paired.into());
}

/// A refusal's response: a problem, whose `code` is one of the codes answering `status`.
fn problem_response(status: u16, what: &str) -> Response {
    let answering: Vec<String> = codes::ALL
        .iter()
        .filter(|code| code.status == status)
        .map(|code| format!("`{}` ({})", code.code, code.title))
        .collect();
    let description = if answering.is_empty() {
        what.to_owned()
    } else {
        format!("{what} `code` is one of: {}.", answering.join(", "))
    };
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(sutra_wire::Problem::name())))
        .build();
    let mut response = ResponseBuilder::new()
        .description(description)
        .content(PROBLEM_JSON, content);
    let header = |description: &str| {
        HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(Type::String))
            .description(Some(description))
            .build()
    };
    match status {
        401 => {
            let challenge = header(
                "`Bearer realm=\"sutra\"`, with `error=\"invalid_token\"` for a token the \
                 server does not accept (RFC 6750).",
            );
            response = response.header("WWW-Authenticate", challenge);
        }
        409 => {
            let retry = header(
                "Seconds to wait before sending the same request again; on a retryable \
                 conflict only.",
            );
            response = response.header("Retry-After", retry);
        }
        _ => {}
    }
    response.build()
}

/// The two answers of every route that reaches the store or the engine, referenced from its
/// `responses(...)` as `ServerFailures`: 500, the server failed, and 503, the store or the engine
/// is away for now.
pub(crate) struct ServerFailures;

impl IntoResponses for ServerFailures {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        BTreeMap::from([
            ("500".to_owned(), refusal::<ServerError>()),
            ("503".to_owned(), refusal::<Unavailable>()),
        ])
    }
}

/// Declares the shared refusals: one [`ToResponse`] each, referenced from a route's
/// `responses(...)` as `(status = 404, response = NotFound)`.
macro_rules! refusals {
    ($($name:ident = $status:literal, $what:literal;)*) => {
        $(
            #[doc = $what]
            pub(crate) struct $name;

            impl<'r> ToResponse<'r> for $name {
                fn response() -> (&'r str, RefOr<Response>) {
                    (stringify!($name), problem_response($status, $what).into())
                }
            }
        )*

        /// Every shared refusal, for the document's components.
        fn refusals() -> Vec<(String, RefOr<Response>)> {
            vec![$({
                let (name, response) = $name::response();
                (name.to_owned(), response)
            }),*]
        }
    };
}

refusals! {
    BadRequest = 400, "The request does not fit: a parameter, a header or the body is malformed \
        (the detail names it), or the URL holds `%00`.";
    Unauthenticated = 401, "The server has tokens, and the request carries none it accepts.";
    Forbidden = 403, "The token's roles do not allow this call, or the deployment belongs to \
        another tenant.";
    NotFound = 404, "What the request names does not exist in the caller's tenant.";
    Conflict = 409, "The request conflicts with the state it found; `retryable` says whether \
        sending it again unchanged can help.";
    PayloadTooLarge = 413, "`SUTRA.INTAKE.VALIDATION`: the body is larger than \
        `sutra.intake.max-bytes`.";
    Unprocessable = 422, "The request is well-formed but cannot be applied.";
    TooMany = 429, "The tenant is at a quota; nothing was done. Send it again later.";
    ServerError = 500, "The server failed: stored data it cannot read, or a step that failed \
        unexpectedly.";
    Unavailable = 503, "The store or the engine is unavailable for now; retry with backoff, \
        possibly on another replica.";
}

#[cfg(test)]
mod tests;
