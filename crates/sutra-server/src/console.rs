//! The operator console (decision 0036): a page and its ES modules, compiled into the binary and
//! served on the API's own address. Its history-mode paths answer the page, which routes in the
//! browser; nothing under `/v1/`, nor the probes, metrics or the document, is ever shadowed, as
//! the router takes those before its fallback asks here.
//!
//! The console reads and acts only through the API, with the token the user gives it: it can
//! do nothing that token's roles cannot.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The files under `/console/`, with their content types.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../console/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../console/api.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../console/dom.js"),
    ),
    (
        "graph.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../console/graph.js"),
    ),
    (
        "views.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../console/views.js"),
    ),
    (
        "system.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../console/system.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../../console/app.css"),
    ),
];

const INDEX: &str = include_str!("../../../console/index.html");

/// The paths the console routes in the browser: each answers its page.
const PAGES: &[&str] = &[
    "instances",
    "failed",
    "deployments",
    "tasks",
    "schedules",
    "system",
];

/// Scripts, styles and connections from this origin only; nothing inline.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
    base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// The console's answer for a GET of `path`, or `None` when the path is not the console's.
/// `tokens`: the server asks for API tokens, and the page asks the user for one.
pub fn serve(path: &str, tokens: bool) -> Option<Response> {
    if let Some(name) = path.strip_prefix("/console/") {
        let (_, content_type, body) = ASSETS.iter().find(|(file, ..)| *file == name)?;
        return Some(answer(content_type, (*body).to_owned()));
    }
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    if path == "/" || PAGES.contains(&first) {
        let auth = if tokens { "token" } else { "open" };
        let page = INDEX.replace("{{auth}}", auth);
        return Some(answer("text/html; charset=utf-8", page));
    }
    None
}

fn answer(content_type: &'static str, body: String) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
