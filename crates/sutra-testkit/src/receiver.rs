//! A webhook receiver for outbox tests: a real HTTP (or HTTPS) server on a free loopback port, in
//! the test process, that records every request and answers each with the next status of a
//! scripted plan. Over HTTPS it presents a certificate made for it alone, for `127.0.0.1`, which
//! nothing trusts unless told to ([`Receiver::certificate_pem`]).
//!
//! It runs on a thread and runtime of its own, so a test that blocks its own thread (waiting for
//! a killed server to die) never stalls the `sutra serve` sending to it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::Value;

use crate::{PATIENCE, Server};

/// One request as the receiver got it.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub path: String,
    pub content_type: Option<String>,
    pub idempotency_key: Option<String>,
    /// The body as JSON, or as a JSON string when it is not JSON.
    pub body: Value,
}

struct Script {
    received: Mutex<Vec<Received>>,
    plan: Mutex<VecDeque<u16>>,
    then: u16,
}

pub struct Receiver {
    url: String,
    /// Its certificate, when it serves HTTPS.
    certificate_pem: Option<String>,
    script: Arc<Script>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    /// Answers the statuses of `plan` in order, then `then` to every later request.
    pub fn start(plan: &[u16], then: u16) -> Receiver {
        Receiver::serve(plan, then, None)
    }

    /// Answers every request with `200 OK`, over HTTPS with a certificate of its own.
    pub fn accepting_over_tls() -> Receiver {
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
            .expect("a self-signed certificate");
        Receiver::serve(&[], 200, Some(made))
    }

    /// The PEM of the certificate an HTTPS receiver presents: what a client must trust.
    pub fn certificate_pem(&self) -> &str {
        self.certificate_pem.as_deref().expect("an HTTPS receiver")
    }

    fn serve(plan: &[u16], then: u16, tls: Option<rcgen::CertifiedKey>) -> Receiver {
        sutra_client::install_tls_provider();
        let script = Arc::new(Script {
            received: Mutex::new(Vec::new()),
            plan: Mutex::new(plan.iter().copied().collect()),
            then,
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a receiver");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking socket");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let address = listener.local_addr().expect("a bound address");
        let url = format!("{scheme}://{address}");
        let certificate_pem = tls.as_ref().map(|made| made.cert.pem());
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let app = axum::Router::new()
            .fallback(record)
            .with_state(Arc::clone(&script));
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the receiver");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
                tokio::select! {
                    () = accept(listener, app, tls) => {}
                    _ = stopped => {}
                }
            });
        });
        Receiver {
            url,
            certificate_pem,
            script,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Answers every request with `200 OK`.
    pub fn accepting() -> Receiver {
        Receiver::start(&[], 200)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    pub fn received(&self) -> Vec<Received> {
        self.script.received.lock().unwrap().clone()
    }

    /// Waits until at least `count` requests have arrived; returns every request so far.
    pub async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {count} requests arrived within {PATIENCE:?}: {received:?}",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves `app` on `listener`, over TLS with `tls`'s certificate when it is given.
async fn accept(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Option<rcgen::CertifiedKey>,
) {
    let Some(made) = tls else {
        let _ = axum::serve(listener, app).await;
        return;
    };
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(vec![made.cert.der().clone()], key)
    .expect("the receiver's certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    while let Ok((tcp, _)) = listener.accept().await {
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            // A client that refuses the certificate ends its handshake: nothing to serve.
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
        });
    }
}

async fn record(
    State(script): State<Arc<Script>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    script.received.lock().unwrap().push(Received {
        path: uri.path().to_owned(),
        content_type: header("content-type"),
        idempotency_key: header("idempotency-key"),
        body,
    });
    let status = script
        .plan
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(script.then);
    StatusCode::from_u16(status).expect("a valid status in the plan")
}

impl Server {
    /// The instance's outbox rows (`GET /v1/instances/{id}/outbox`).
    pub async fn outbox(&self, id: &str) -> Vec<Value> {
        let (status, body) = self.get(&format!("/v1/instances/{id}/outbox")).await;
        assert_eq!(status, 200, "{body}");
        body.as_array().cloned().unwrap_or_default()
    }

    /// Polls an instance's outbox until it has rows and every one is in `state`.
    pub async fn wait_for_outbox(&self, id: &str, state: &str) -> Vec<Value> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let rows = self.outbox(id).await;
            if !rows.is_empty() && rows.iter().all(|row| row["state"] == state) {
                return rows;
            }
            assert!(
                Instant::now() < deadline,
                "the outbox of {id} never became {state}: {rows:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}
