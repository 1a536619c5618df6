//! The API as the holder of one API token sees it (SPEC §4): the requests of [`Server`]'s
//! helpers, each carrying `Authorization: Bearer`, for tests of servers configured with
//! `sutra.auth.tokens` — several holders, several tenants, one server.

use reqwest::RequestBuilder;
use serde_json::Value;

use crate::{Server, event, status_and_json};

/// Requests to one server, authenticated by one token.
pub struct Bearer {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Server {
    /// Calls made with `token`.
    pub fn bearer(&self, token: &str) -> Bearer {
        Bearer {
            http: self.http.clone(),
            base: self.url.clone(),
            token: token.to_owned(),
        }
    }
}

impl Bearer {
    pub async fn get(&self, path: &str) -> (u16, Value) {
        answer(self.request(reqwest::Method::GET, path)).await
    }

    /// A GET whose answer is text, such as `/metrics`: its status and body.
    pub async fn text(&self, path: &str) -> (u16, String) {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a text body"))
    }

    /// A POST without a body, such as cancel or restore.
    pub async fn post(&self, path: &str) -> (u16, Value) {
        answer(self.request(reqwest::Method::POST, path)).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        answer(self.request(reqwest::Method::POST, path).json(body)).await
    }

    pub async fn deploy(&self, yaml: &str) -> (u16, Value) {
        let request = self
            .request(reqwest::Method::POST, "/v1/deployments")
            .body(yaml.to_owned());
        answer(request).await
    }

    /// Sends a structured CloudEvent on an HTTP channel.
    pub async fn send(&self, channel: &str, id: &str, data: Value) -> (u16, Value) {
        let request = self
            .request(
                reqwest::Method::POST,
                &format!("/v1/channels/{channel}/messages"),
            )
            .header("content-type", "application/cloudevents+json")
            .body(event(id, data).to_string());
        answer(request).await
    }

    fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }
}

async fn answer(request: RequestBuilder) -> (u16, Value) {
    status_and_json(request.send().await.expect("the server answers")).await
}
