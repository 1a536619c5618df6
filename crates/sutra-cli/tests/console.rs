//! The operator console's serving rules (decision 0036), over HTTP against a real `sutra serve`:
//! its page at `/` and at every history-mode path, its assets with their content types, and the
//! API, probes, metrics and document never shadowed by it.

use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, serve};

/// Status, content type and body of a GET.
async fn fetch(server: &Server, path: &str) -> (u16, String, String) {
    let response = server.http.get(server.url(path)).send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, response.text().await.unwrap())
}

#[tokio::test]
async fn the_page_answers_at_the_root_and_every_history_path() {
    let scratch = Scratch::new("console-pages");
    let server = Server::start(&serve!(scratch.database()));
    for path in [
        "/",
        "/instances",
        "/instances/some-id",
        "/failed",
        "/deployments",
        "/deployments/shop/2",
        "/tasks",
        "/system",
    ] {
        let (status, content_type, body) = fetch(&server, path).await;
        assert_eq!(status, 200, "{path}");
        assert!(
            content_type.starts_with("text/html"),
            "{path}: {content_type}"
        );
        assert!(
            body.contains(r#"<script type="module" src="/console/app.js">"#),
            "{path}"
        );
        assert!(
            body.contains(r#"<meta name="sutra-auth" content="open">"#),
            "{path}: without tokens the page says so"
        );
    }
}

#[tokio::test]
async fn the_assets_answer_with_their_content_types_and_a_policy() {
    let scratch = Scratch::new("console-assets");
    let server = Server::start(&serve!(scratch.database()));
    for (path, expected) in [
        ("/console/app.js", "text/javascript"),
        ("/console/api.js", "text/javascript"),
        ("/console/dom.js", "text/javascript"),
        ("/console/graph.js", "text/javascript"),
        ("/console/views.js", "text/javascript"),
        ("/console/system.js", "text/javascript"),
        ("/console/app.css", "text/css"),
    ] {
        let response = server.http.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        let content_type = headers["content-type"].to_str().unwrap();
        assert!(content_type.starts_with(expected), "{path}: {content_type}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("default-src 'self'"), "{path}: {policy}");
        assert!(!response.text().await.unwrap().is_empty(), "{path}");
    }
    let (status, _, body) = fetch(&server, "/console/missing.js").await;
    assert_eq!(status, 404, "an unknown asset is no page");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "SUTRA.API.ROUTE.NOT_FOUND");
}

#[tokio::test]
async fn the_api_probes_metrics_and_document_are_never_shadowed() {
    let scratch = Scratch::new("console-unshadowed");
    let server = Server::start(&serve!(scratch.database()));
    for path in [
        "/v1/instances/some-id/nowhere",
        "/v1/console",
        "/v1/",
        "/v1",
        "/elsewhere",
    ] {
        let (status, content_type, body) = fetch(&server, path).await;
        assert_eq!(status, 404, "{path}");
        assert!(
            content_type.starts_with("application/problem+json"),
            "{path}: {content_type}"
        );
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["code"], "SUTRA.API.ROUTE.NOT_FOUND", "{path}");
    }
    let (status, _, body) = fetch(&server, "/v1/instances/some-id").await;
    assert_eq!(status, 404);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "SUTRA.INSTANCE.NOT_FOUND");

    let (status, content_type, body) = fetch(&server, "/healthz").await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["status"],
        "ok"
    );
    let (status, _, body) = fetch(&server, "/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["status"],
        "ready"
    );
    let (status, content_type, body) = fetch(&server, "/metrics").await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert!(!body.contains("<html"));
    let (status, content_type, body) = fetch(&server, "/openapi.json").await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    let document: Value = serde_json::from_str(&body).unwrap();
    assert!(document["paths"]["/v1/instances/{id}/tasks"].is_object());

    // Only reads answer the page: a POST to a console path is the API's refusal.
    let response = server
        .http
        .post(server.url("/instances"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn with_tokens_the_page_asks_for_one_and_the_api_reads_nothing_without_it() {
    let server =
        Server::start(&serve!("sqlite::memory:").tokens("acme:admin:acme-admin-0123456789abcdef"));
    let (status, content_type, body) = fetch(&server, "/instances/some-id").await;
    assert_eq!(status, 200, "the page itself holds no data");
    assert!(content_type.starts_with("text/html"));
    assert!(body.contains(r#"<meta name="sutra-auth" content="token">"#));
    let (status, _, _) = fetch(&server, "/console/app.js").await;
    assert_eq!(status, 200);
    let (status, _, body) = fetch(&server, "/v1/instances").await;
    assert_eq!(status, 401);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "SUTRA.AUTH.UNAUTHENTICATED");
}

/// A choice, a receive with a timeout route, a parallel of two tasks, and a failure route.
const SHOP: &str = r#"
name: shop
channels:
  orders: { transport: http, correlate: data.id }
  replies: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: route
        choice:
          - when: vars.input.amount > 100
            next: review
        otherwise: split
      - id: review
        receive: { channel: replies, key: vars.input.id, timeout: P1D, on-timeout: expired }
      - id: split
        parallel:
          - - id: pick
              task: { topic: pick, input: { id: "= vars.input.id" } }
          - - id: pack
              task: { topic: pack, input: { id: "= vars.input.id" } }
      - id: done
        end: {}
      - id: expired
        fail: { code: ORDER.EXPIRED }
"#;

fn ids(page: &Value) -> Vec<&str> {
    let items = page["items"].as_array().expect("a page");
    items.iter().map(|i| i["id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn the_api_answers_what_the_console_reads_graphs_tasks_and_filtered_instances() {
    let scratch = Scratch::new("console-reads");
    let server = serve!(scratch.database()).deployed(SHOP).await;
    let mut started = Vec::new();
    for (id, amount) in [("o1", json!(5)), ("o2", json!(500)), ("o3", json!("x"))] {
        let (status, body) = server
            .send("orders", id, json!({"id": id, "amount": amount}))
            .await;
        assert_eq!(status, 202, "{body}");
        started.push(body["instance"].as_str().unwrap().to_owned());
    }
    let [small, large, broken] = [&started[0], &started[1], &started[2]];
    server.wait_for_status(broken, "failed").await;

    let (status, graph) = server.get("/v1/deployments/shop/1/graph").await;
    assert_eq!(status, 200, "{graph}");
    let flow = &graph["flows"][0];
    assert_eq!(
        (flow["name"].as_str(), flow["entry"].as_str()),
        (Some("order"), Some("route"))
    );
    assert_eq!(flow["start"], "orders");
    let node = |id: &str| {
        let nodes = flow["nodes"].as_array().unwrap();
        nodes.iter().find(|n| n["id"] == id).unwrap().clone()
    };
    let edges = |id: &str| -> Vec<(Value, String)> {
        let node = node(id);
        let edges = node["edges"].as_array().unwrap();
        edges
            .iter()
            .map(|e| (e["to"].clone(), e["label"].as_str().unwrap().to_owned()))
            .collect()
    };
    let to = |id: &str, label: &str| (json!(id), label.to_owned());
    assert_eq!(
        edges("route"),
        [
            to("review", "when vars.input.amount > 100"),
            to("split", "otherwise")
        ]
    );
    assert_eq!(
        edges("review"),
        [to("split", "next"), to("expired", "on-timeout")]
    );
    assert_eq!(
        edges("split"),
        [
            to("pick", "branch"),
            to("pack", "branch"),
            to("done", "join")
        ]
    );
    assert_eq!(
        edges("pick"),
        [(Value::Null, "next".to_owned())],
        "a branch ends"
    );
    assert_eq!(edges("done"), []);
    assert_eq!(
        (
            node("pick")["branch_of"].as_str(),
            node("pick")["branch"].as_u64()
        ),
        (Some("split"), Some(0))
    );
    assert_eq!(
        (
            node("pack")["branch_of"].as_str(),
            node("pack")["branch"].as_u64()
        ),
        (Some("split"), Some(1))
    );
    assert_eq!(node("done")["branch_of"], Value::Null);
    assert_eq!(
        (
            node("pick")["kind"].as_str(),
            node("pick")["detail"].as_str()
        ),
        (Some("task"), Some("pick"))
    );
    assert_eq!(node("expired")["detail"], "ORDER.EXPIRED");
    let (status, body) = server.get("/v1/deployments/shop/9/graph").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("SUTRA.DEPLOY.NOT_FOUND"))
    );

    let (status, tasks) = server.get(&format!("/v1/instances/{small}/tasks")).await;
    assert_eq!(status, 200, "{tasks}");
    let mut topics: Vec<(&str, &str)> = tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["topic"].as_str().unwrap(), t["state"].as_str().unwrap()))
        .collect();
    topics.sort_unstable();
    assert_eq!(topics, [("pack", "available"), ("pick", "available")]);
    let (status, tasks) = server.get(&format!("/v1/instances/{large}/tasks")).await;
    assert_eq!((status, tasks), (200, json!([])));
    let (status, body) = server
        .get("/v1/instances/0190e2a6-0000-7000-8000-000000000000/tasks")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("SUTRA.INSTANCE.NOT_FOUND"))
    );

    let listed = |query: &'static str| {
        let server = &server;
        async move {
            let (status, page) = server.get(&format!("/v1/instances?{query}")).await;
            assert_eq!(status, 200, "{query}: {page}");
            page
        }
    };
    let page = listed("failure_code=SUTRA.RUNTIME.EXPRESSION.ERROR").await;
    assert_eq!(ids(&page), [broken.as_str()]);
    assert_eq!(
        ids(&listed("failure_code=ORDER.EXPIRED").await),
        Vec::<&str>::new()
    );
    assert_eq!(ids(&listed("correlation_key=o2").await), [large.as_str()]);
    assert_eq!(ids(&listed("version=1").await).len(), 3);
    assert_eq!(ids(&listed("version=2").await).len(), 0);
    assert_eq!(
        ids(&listed("created_before=2999-01-01T00:00:00Z").await).len(),
        3
    );
    assert_eq!(
        ids(&listed("created_after=2999-01-01T00:00:00Z").await).len(),
        0
    );
    assert_eq!(
        ids(&listed("created_after=2000-01-01T00:00:00Z&status=suspended").await).len(),
        2
    );
    let (status, body) = server.get("/v1/instances?created_after=yesterday").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("SUTRA.API.REQUEST.INVALID"))
    );
    assert!(
        body["detail"].as_str().unwrap().contains("created_after"),
        "{body}"
    );
}
