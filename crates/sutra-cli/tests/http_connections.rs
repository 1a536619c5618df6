//! The HTTP server sheds what would hold its descriptors for nothing (decision 0075): a flood of
//! idle sockets cannot keep the probes or the API from answering, and a request's head sent in
//! part, a body that trickles in and a connection without a request are each closed after
//! their own timeout. Driven over raw loopback sockets, as a careless or hostile client would.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sutra_testkit::{Scratch, Server, ServerOptions, serve};

/// How much longer than a timeout the server may take to act on it: far above what it needs,
/// so that a slow machine makes these tests slower, never red.
const SLACK: Duration = Duration::from_secs(10);

const DEPLOYMENT: &str = r#"
name: flooded
channels:
  pings: { transport: http }
flows:
  ping:
    start: { channel: pings }
    nodes:
      - id: done
        end: {}
"#;

fn address(server: &Server) -> SocketAddr {
    server.listen_address().parse().expect("a socket address")
}

/// What the server sends on `socket` until it closes it (an end of stream or a reset), failing
/// the test unless it does within `within`.
fn read_until_closed(socket: &mut TcpStream, within: Duration) -> String {
    let deadline = Instant::now() + within;
    let (mut read, mut buffer) = (Vec::new(), [0; 4096]);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "the server kept the connection open past {within:?}, having sent {:?}",
            String::from_utf8_lossy(&read)
        );
        socket.set_read_timeout(Some(left)).unwrap();
        match socket.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => read.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading from the server: {e}"),
        }
    }
    String::from_utf8_lossy(&read).into_owned()
}

/// Sends `head` (and `body`) on a new connection the request closes, and reads the answer;
/// failing the test unless it comes within [`SLACK`].
fn request(server: &Server, head: &str, body: &str) -> String {
    let mut socket = TcpStream::connect_timeout(&address(server), SLACK).expect("connect");
    let request = format!(
        "{head}\r\nHost: sutra\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    socket
        .write_all(request.as_bytes())
        .expect("send the request");
    read_until_closed(&mut socket, SLACK)
}

/// The value the `serving` line gives `field`.
fn serving(server: &mut Server, field: &str) -> String {
    let fields = sutra_testkit::log_fields(&server.wait_for_stderr(" serving "));
    let value = fields.iter().find(|(name, _)| name == field);
    value
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| panic!("no {field} in the serving line: {fields:?}"))
}

#[test]
fn an_idle_flood_cannot_keep_healthz_from_answering() {
    const LIMIT: u32 = 1024;
    const FLOOD: usize = 1_100;
    let scratch = Scratch::new("idle-flood");
    // The cap is left to be derived from the limit, as on a machine nobody tuned.
    let options = serve!(scratch.database())
        .file_limit(LIMIT)
        .env("SUTRA_LOG", "info");
    let mut server = Server::start(&options);
    let cap: u32 = serving(&mut server, "max_connections").parse().unwrap();
    assert!(cap < LIMIT, "the cap {cap} leaves no room under the limit");

    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|n| {
            TcpStream::connect_timeout(&address(&server), SLACK).unwrap_or_else(|e| {
                panic!("idle connection {n}: {e} (this test's own `ulimit -n` must exceed {FLOOD})")
            })
        })
        .collect();

    let asked = Instant::now();
    let answer = request(&server, "GET /healthz HTTP/1.1", "");
    let waited = asked.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let deployed = request(&server, "POST /v1/deployments HTTP/1.1", DEPLOYMENT);
    assert!(deployed.starts_with("HTTP/1.1 201"), "{deployed}");
    let closed = flood
        .iter()
        .filter(|socket| closed_by_server(socket))
        .count();
    println!(
        "{FLOOD} idle connections against a limit of {LIMIT} files and a cap of {cap}: /healthz \
         answered in {waited:?}; the server had closed {closed} of them"
    );

    assert!(server.stop().success(), "{}", server.stderr_text());
    drop(flood);
}

/// Whether the server has closed `socket`: reading it ends at once, rather than finding
/// nothing yet.
fn closed_by_server(socket: &TcpStream) -> bool {
    socket.set_nonblocking(true).unwrap();
    let mut byte = [0];
    let closed = match (&*socket).read(&mut byte) {
        Ok(_) => true,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    socket.set_nonblocking(false).unwrap();
    closed
}

/// A server whose `sutra.http.*` timeouts are `timeouts` (`("HEADER", "PT1S")`, …).
fn with_timeouts(scratch: &Scratch, timeouts: &[(&str, &str)]) -> ServerOptions {
    timeouts
        .iter()
        .fold(serve!(scratch.database()), |options, (which, value)| {
            options.env(&format!("SUTRA_HTTP_{which}_TIMEOUT"), value)
        })
}

#[test]
fn a_request_head_sent_in_part_is_cut_off_after_the_header_timeout() {
    let scratch = Scratch::new("header-timeout");
    // The idle timeout keeps its minute: only the head's timeout can close this soon.
    let server = Server::start(&with_timeouts(&scratch, &[("HEADER", "PT1S")]));
    let mut socket = TcpStream::connect_timeout(&address(&server), SLACK).unwrap();

    let sent = Instant::now();
    socket.write_all(b"GET /healthz HT").unwrap();
    let answer = read_until_closed(&mut socket, Duration::from_secs(1) + SLACK);

    assert_eq!(
        answer, "",
        "a request whose head never ended is not answered"
    );
    assert!(
        sent.elapsed() >= Duration::from_secs(1),
        "{:?}",
        sent.elapsed()
    );
}

#[test]
fn a_connection_without_a_request_is_closed_after_the_idle_timeout_not_the_header_timeout() {
    let scratch = Scratch::new("idle-timeout");
    let idle = Duration::from_secs(3);
    let timeouts = [("HEADER", "PT1S"), ("IDLE", "PT3S")];
    let server = Server::start(&with_timeouts(&scratch, &timeouts));
    let opened = Instant::now();
    // One connection never sends a byte; the other is kept alive after its answer.
    let mut silent = TcpStream::connect_timeout(&address(&server), SLACK).unwrap();
    let mut kept = TcpStream::connect_timeout(&address(&server), SLACK).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: sutra\r\n\r\n")
        .unwrap();

    let answer = read_until_closed(&mut kept, idle + SLACK);
    let kept_for = opened.elapsed();
    read_until_closed(&mut silent, idle + SLACK);

    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(kept_for >= idle, "closed after {kept_for:?}");
    assert!(
        opened.elapsed() >= idle,
        "closed after {:?}",
        opened.elapsed()
    );
}

#[test]
fn a_body_that_trickles_in_is_answered_and_its_connection_closed_after_the_body_timeout() {
    let scratch = Scratch::new("body-timeout");
    let server = Server::start(&with_timeouts(&scratch, &[("BODY", "PT1S")]));
    let mut socket = TcpStream::connect_timeout(&address(&server), SLACK).unwrap();

    let sent = Instant::now();
    // A tenth of the body it announces, and then nothing.
    let head = "POST /v1/deployments HTTP/1.1\r\nHost: sutra\r\nContent-Length: 100\r\n\r\n";
    socket
        .write_all(format!("{head}name: slow").as_bytes())
        .unwrap();
    let answer = read_until_closed(&mut socket, Duration::from_secs(1) + SLACK);

    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("sutra.http.body-timeout"), "{answer}");
    assert!(
        sent.elapsed() >= Duration::from_secs(1),
        "{:?}",
        sent.elapsed()
    );
}

/// A request target past 65,534 bytes and more headers than the limit are refused by the HTTP
/// layer while it parses them, before any handler can write a coded answer (docs/spec.md §10):
/// `414` and `431`, without a body, and the server goes on answering (issue 48, finding 7).
#[test]
fn an_overlong_target_and_oversized_headers_are_refused_bare_and_the_server_answers_on() {
    let scratch = Scratch::new("overlong-head");
    let server = Server::start(&serve!(scratch.database()));
    let long_target = format!("GET /v1/instances?flow={} HTTP/1.1", "a".repeat(70_000));
    let answer = request(&server, &long_target, "");
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer:.200}");
    // Past hyper's hundred headers: small on the wire, so the request is whole before the refusal.
    let headers: String = (0..120).map(|n| format!("\r\nX-Filler-{n}: b")).collect();
    let answer = request(&server, &format!("GET /healthz HTTP/1.1{headers}"), "");
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.200}");
    let answer = request(&server, "GET /healthz HTTP/1.1", "");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:.200}");
}
