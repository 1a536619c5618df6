//! A TCP proxy of the tests' own on loopback, between replicas and PostgreSQL, for the network
//! faults a database connection meets in production: latency, a partition that swallows traffic
//! without closing anything, and connections cut mid-transaction.
//!
//! Every accepted connection is forwarded to the target in both directions, chunk by chunk. The
//! faults apply to every connection at once and take effect at the next chunk:
//! - [`Proxy::delay`] holds each chunk that long before forwarding it (latency, or the delay a
//!   lossy link's retransmissions add);
//! - [`Proxy::partition`] forwards nothing — bytes wait in the proxy, as packets a link drops
//!   would be retransmitted — until [`Proxy::heal`]; a peer that gives up meanwhile (a timeout,
//!   the server's `idle_in_transaction_session_timeout`) closes its side, which the proxy passes on;
//! - [`Proxy::cut`] closes every open connection at once, as a reset would; new ones are
//!   accepted.
//!
//! Only loopback: the proxy listens on 127.0.0.1 and is dropped with the test. It reaches the
//! database over TCP, or over the unix socket a test cluster listens on. It forwards on a
//! runtime of its own, so that a test blocked in a synchronous wait (starting a `Server`) does
//! not stall the traffic of the replica it is starting.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;
use url::Url;

/// Where the proxy forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Tcp(String),
    Unix(PathBuf),
}

impl Target {
    /// The server a `postgres://` URL connects to: a `host` parameter naming a directory is a
    /// unix socket in it (libpq's rule), else the URL's host and port.
    fn of(url: &Url) -> Target {
        let port = url.port().unwrap_or(5432);
        let socket_dir = url
            .query_pairs()
            .find(|(name, value)| name == "host" && value.starts_with('/'))
            .map(|(_, dir)| PathBuf::from(dir.into_owned()));
        match socket_dir {
            Some(dir) => Target::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            None => Target::Tcp(format!(
                "{}:{port}",
                url.host_str().expect("a URL with a host")
            )),
        }
    }
}

/// The faults in force, watched by every forwarding task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Faults {
    delay: Duration,
    partitioned: bool,
    /// Grows by one at each cut: a forwarding task that sees it move closes its connection.
    cuts: u64,
}

/// A proxy on a free loopback port to `target`, forwarding until dropped.
pub struct Proxy {
    address: SocketAddr,
    faults: watch::Sender<Faults>,
    /// Taken by `Drop`, which shuts it down without waiting for its tasks.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Proxy {
    /// A proxy in front of the PostgreSQL server `url` connects to, and `url` rewritten to
    /// connect through it.
    pub fn in_front_of(url: &str) -> (Proxy, String) {
        let mut url = Url::parse(url).expect("a postgres:// URL");
        let proxy = Proxy::start(Target::of(&url));
        let others: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(name, _)| name != "host")
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect();
        url.set_query(None);
        if !others.is_empty() {
            url.query_pairs_mut().extend_pairs(others);
        }
        url.set_host(Some("127.0.0.1")).expect("a URL with a host");
        url.set_port(Some(proxy.address.port()))
            .expect("a URL with a host");
        (proxy, url.to_string())
    }

    /// Starts forwarding connections to `target`.
    fn start(target: Target) -> Proxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sutra-test-proxy")
            .enable_all()
            .build()
            .expect("a runtime for the proxy");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let address = listener.local_addr().expect("the proxy's address");
        let (faults, watching) = watch::channel(Faults::default());
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("a tokio listener");
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(connection(client, target.clone(), watching.clone()));
            }
        });
        Proxy {
            address,
            faults,
            runtime: Some(runtime),
        }
    }

    /// Holds every chunk `delay` before forwarding it; zero forwards at once.
    pub fn delay(&self, delay: Duration) {
        self.faults.send_modify(|faults| faults.delay = delay);
    }

    /// Forwards nothing, in either direction, until [`Proxy::heal`].
    pub fn partition(&self) {
        self.faults.send_modify(|faults| faults.partitioned = true);
    }

    /// Ends a partition and any delay: what waited is forwarded.
    pub fn heal(&self) {
        self.faults.send_modify(|faults| {
            faults.partitioned = false;
            faults.delay = Duration::ZERO;
        });
    }

    /// Closes every connection open now. Later ones are forwarded as before.
    pub fn cut(&self) {
        self.faults.send_modify(|faults| faults.cuts += 1);
    }
}

impl Drop for Proxy {
    /// Ends every connection: the runtime's tasks are dropped, and their sockets with them.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Connects to `target` for `client`, and forwards between them.
async fn connection(client: TcpStream, target: Target, faults: watch::Receiver<Faults>) {
    match &target {
        Target::Tcp(address) => {
            if let Ok(server) = TcpStream::connect(address).await {
                let (read, write) = server.into_split();
                forward(client, read, write, faults).await;
            }
        }
        Target::Unix(path) => {
            if let Ok(server) = UnixStream::connect(path).await {
                let (read, write) = server.into_split();
                forward(client, read, write, faults).await;
            }
        }
    }
}

/// Forwards both directions until either side closes or a cut comes.
async fn forward(
    client: TcpStream,
    server_read: impl AsyncRead + Unpin,
    server_write: impl AsyncWrite + Unpin,
    faults: watch::Receiver<Faults>,
) {
    let cuts = faults.borrow().cuts;
    let (client_read, client_write) = client.into_split();
    let upstream = pipe(client_read, server_write, faults.clone(), cuts);
    let downstream = pipe(server_read, client_write, faults, cuts);
    // Either direction ending ends the connection: dropping the halves closes both sockets.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

/// Copies `from` to `to` chunk by chunk under the faults in force, until `from` closes, a write
/// fails, or a cut after `cuts` comes.
async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut faults: watch::Receiver<Faults>,
    cuts: u64,
) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            () = cut_after(&mut faults, cuts) => return,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !passable(&mut faults, cuts).await {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// Waits until a chunk may pass: after the delay in force, and not while partitioned. False if a
/// cut comes meanwhile.
async fn passable(faults: &mut watch::Receiver<Faults>, cuts: u64) -> bool {
    let delay = faults.borrow().delay;
    if !delay.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = cut_after(faults, cuts) => return false,
        }
    }
    loop {
        let now = *faults.borrow_and_update();
        if now.cuts != cuts {
            return false;
        }
        if !now.partitioned {
            return true;
        }
        if faults.changed().await.is_err() {
            return false;
        }
    }
}

/// Resolves once a cut after `cuts` comes (or the proxy is gone).
async fn cut_after(faults: &mut watch::Receiver<Faults>, cuts: u64) {
    let _ = faults.wait_for(|now| now.cuts != cuts).await;
}
