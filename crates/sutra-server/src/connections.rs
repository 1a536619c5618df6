//! The HTTP server: accepts connections and serves each with hyper, closing those that would
//! hold a file descriptor for nothing, so that a flood of idle or slow sockets cannot keep the
//! probes, the API or the store's own connections from being served (decision 0075).
//!
//! - A connection with no request in flight is *idle*: it is closed `idle_timeout` after its
//!   accept or its last answer. Once a byte of a request arrives, the request's head must be
//!   complete within `header_timeout`, and its body within `body_timeout` of the head.
//! - At most `max_connections` are open. At the cap, each new connection closes the one idle
//!   the longest; with none idle, it waits — and those behind it wait in the kernel's backlog —
//!   until one is idle or closes.
//! - A connection closed while it serves a request (the server drains, or it took one as it
//!   was evicted) finishes that request first (hyper's `graceful_shutdown`). One with nothing in
//!   flight and nothing left to write is dropped at once: hyper's graceful shutdown would wait
//!   for the end of a head begun on a fresh connection.
//!
//! hyper's own `header_read_timeout` is off: in the hyper this builds with it also runs while a
//! kept-alive connection waits for its next request, so it cannot tell a slow head from an
//! idle connection, and would close every idle connection after the head's short timeout.

pub mod descriptors;

mod bodies;
mod registry;

use std::convert::Infallible;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use jiff::SignedDuration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, warn};

use bodies::{Answer, TimedBody};
use registry::{Admitted, Connection, Registry};

/// The HTTP server's timeouts and connection cap (`sutra.http.*`), each positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_timeout: SignedDuration,
    pub idle_timeout: SignedDuration,
    pub body_timeout: SignedDuration,
    pub max_connections: u32,
}

/// How long the listener pauses after an `accept` that failed for want of resources (the
/// descriptors ran out after all): long enough not to spin, short enough that a closed idle
/// connection's descriptor is taken up at once.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting, lets every
/// connection finish the request it is serving, and returns once all have closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let registry = Arc::new(Registry::new(limits.max_connections));
    let (drain, draining) = watch::channel(false);
    let router = TowerToHyperService::new(router);
    let mut shutdown = pin!(shutdown);
    loop {
        let admitted = tokio::select! {
            () = &mut shutdown => break,
            admitted = admit(&listener, &registry) => admitted,
        };
        tokio::spawn(serve_connection(
            admitted,
            router.clone(),
            limits,
            draining.clone(),
        ));
    }
    drop(listener);
    drain.send_replace(true);
    registry.all_closed().await;
}

/// The next connection, once it has a slot.
async fn admit(listener: &TcpListener, registry: &Arc<Registry>) -> (TcpStream, Admitted) {
    let stream = accept(listener, registry).await;
    let slot = registry.slot().await;
    (stream, registry.admit(slot))
}

async fn accept(listener: &TcpListener, registry: &Registry) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                // Answers leave at once: without TCP_NODELAY a response written in more than
                // one piece waits for the client's delayed ACK behind Nagle's algorithm.
                if let Err(error) = stream.set_nodelay(true) {
                    debug!(%error, "could not set TCP_NODELAY on a connection");
                }
                return stream;
            }
            // The client gave up before it was accepted: nothing to serve.
            Err(error) if gone_before_accept(&error) => {}
            Err(error) => {
                // Most likely out of descriptors, though the cap was to leave room: an idle
                // connection's descriptor is the one the server can give back.
                warn!(%error, "cannot accept a connection; closing the longest-idle one");
                registry.close_longest_idle();
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

fn gone_before_accept(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Serves one connection until its client closes it or it is closed (`registry::Close` says
/// why).
async fn serve_connection(
    (stream, admitted): (TcpStream, Admitted),
    router: TowerToHyperService<Router>,
    limits: Limits,
    mut draining: watch::Receiver<bool>,
) {
    let connection = Arc::clone(&admitted.connection);
    let io = TokioIo::new(Watched {
        stream,
        connection: Arc::clone(&connection),
    });
    let service = Tracked {
        router,
        connection: Arc::clone(&connection),
        body_timeout: limits.body_timeout.unsigned_abs(),
    };
    let mut builder = http1::Builder::new();
    // The heads' and idle connections' timeouts are this module's (see its documentation).
    builder.header_read_timeout(None);
    let mut served = pin!(builder.serve_connection(io, service));
    let ended = tokio::select! {
        ended = served.as_mut() => ended,
        why = connection.until_closed(&limits, &mut draining) => {
            debug!(?why, "closing a connection");
            if !connection.is_busy() {
                // Dropping `served` closes the socket before `admitted` frees the slot.
                return;
            }
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    if let Err(error) = ended {
        debug!(%error, "a connection ended in error");
    }
}

/// The router, telling the connection when a request is in flight and bounding its body.
#[derive(Clone)]
struct Tracked {
    router: TowerToHyperService<Router>,
    connection: Arc<Connection>,
    body_timeout: Duration,
}

type Answered = Pin<Box<dyn Future<Output = Result<Response<Answer>, Infallible>> + Send>>;

impl Service<Request<Incoming>> for Tracked {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Answered;

    fn call(&self, request: Request<Incoming>) -> Answered {
        let in_flight = self.connection.request_began();
        let request = request.map(|body| TimedBody::new(body, self.body_timeout));
        let answered = self.router.call(request);
        Box::pin(async move {
            let response = answered.await?;
            Ok(response.map(|body| Answer::new(body, in_flight)))
        })
    }
}

/// The connection's socket, telling the connection when a request's first bytes arrive and
/// when an answer waits for its client to read.
struct Watched {
    stream: TcpStream,
    connection: Arc<Connection>,
}

impl Watched {
    fn wrote<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.connection.write_blocked(polled.is_pending());
        polled
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.connection.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.wrote(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.wrote(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_flush(cx);
        this.wrote(polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
