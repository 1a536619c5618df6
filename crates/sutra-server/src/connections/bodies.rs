//! The bodies hyper and the router exchange, wrapped: a request's body bounded in time, and an
//! answer's body that keeps its request in flight until hyper has taken all of it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use super::registry::InFlight;

/// A request's body that must arrive in full within `sutra.http.body-timeout` of its head.
/// Late, it ends with [`BodyTimedOut`], which the handler reading it answers as any body it
/// cannot read; hyper then closes the connection, as it does after an answer given before the
/// body was read to its end.
pub(super) struct TimedBody {
    body: Incoming,
    due: Instant,
    timeout: Duration,
    /// Set when the body first has to be waited for: most bodies arrive with their head.
    timer: Option<Pin<Box<Sleep>>>,
}

impl TimedBody {
    pub(super) fn new(body: Incoming, timeout: Duration) -> TimedBody {
        TimedBody {
            body,
            due: Instant::now() + timeout,
            timeout,
            timer: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the body did not arrive within {0:?} of the request's head (sutra.http.body-timeout)")]
pub(super) struct BodyTimedOut(Duration);

impl Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let due = this.due;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut(this.timeout).into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The router's answer, its request in flight until hyper drops it: after its last frame, or
/// when the connection ends.
pub(super) struct Answer {
    body: axum::body::Body,
    _in_flight: InFlight,
}

impl Answer {
    pub(super) fn new(body: axum::body::Body, in_flight: InFlight) -> Answer {
        Answer {
            body,
            _in_flight: in_flight,
        }
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
