//! What the HTTP API holds a request body to before anything acts on it: the body read as JSON
//! (a NUL anywhere refused, naming where; a body that does not fit naming the field at fault),
//! and the task surface's checks (SPEC §4, §5.5) — a worker's name, the topics it polls, the
//! durations it asks for. Each refusal is a detail the server answers as
//! `SUTRA.API.REQUEST.INVALID`.
//!
//! Pure, like the rest of the core, so that the server's routes stay thin and these rules are
//! fuzzed on their own, without a server (decision 0042).

use jiff::SignedDuration;
use serde::de::DeserializeOwned;

use crate::check;
use crate::duration::parse_duration;

/// Reads a JSON body into `T`, naming the field at fault when it does not fit. A string holding
/// NUL, which no store can hold, is refused with the JSON pointer of the first one.
pub fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    // JSON can hold a NUL only as the escape `\u0000`: a body without those six bytes (nearly
    // every one, task completions on the hot path among them) is read once, straight into `T`.
    if bytes.windows(6).any(|window| window == b"\\u0000") {
        refuse_nul(bytes)?;
    }
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut reader).map_err(|error| {
        let field = error.path().to_string();
        let inner = error.into_inner();
        if field == "." {
            format!("the body: {inner}")
        } else {
            format!("`{field}`: {inner}")
        }
    })
}

fn refuse_nul(bytes: &[u8]) -> Result<(), String> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Ok(());
    };
    match crate::storable::nul_pointers(&value).first() {
        Some(pointer) => Err(format!(
            "`{pointer}`: contains the character \\u0000, which cannot be stored; remove it"
        )),
        None => Ok(()),
    }
}

/// The longest worker id a poll takes, in bytes: it is recorded on every task the poll locks.
pub const WORKER_BYTES_MAX: usize = 200;

/// The most topics one poll names.
pub const POLL_TOPICS_MAX: usize = 100;

/// A poll's checked durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollTerms {
    /// How long each task stays locked; the task's own lock when `None`.
    pub lock: Option<SignedDuration>,
    /// How long the poll may wait for a task; zero when it did not ask.
    pub wait: SignedDuration,
}

/// `POST /v1/tasks/poll`: who polls, for what, how many, and for how long.
pub fn poll(
    worker: &str,
    topics: &[String],
    max: u32,
    lock: Option<&str>,
    wait: Option<&str>,
) -> Result<PollTerms, String> {
    check_worker(worker)?;
    check_topics(topics)?;
    if max == 0 {
        return Err("`max` must be at least 1".into());
    }
    let lock = lock.map(|lock| lock_duration("lock", lock)).transpose()?;
    let wait = wait.map(|wait| duration("wait", wait)).transpose()?;
    Ok(PollTerms {
        lock,
        wait: wait.unwrap_or(SignedDuration::ZERO),
    })
}

/// A batched completion's item asking for the worker's next task (`take`), checked as a poll's
/// worker, topics and lock are: the lock it asks for, if any.
pub fn take(
    worker: &str,
    topics: &[String],
    lock: Option<&str>,
) -> Result<Option<SignedDuration>, String> {
    check_worker(worker)?;
    check_topics(topics)?;
    lock.map(|lock| lock_duration("take.lock", lock))
        .transpose()
}

/// A batched completion holds at most `max` items.
pub fn batch(items: usize, max: usize) -> Result<(), String> {
    if items > max {
        return Err(format!(
            "a batch completes at most {max} tasks and this one holds {items}; send it in parts"
        ));
    }
    Ok(())
}

/// `POST /v1/tasks/{id}/fail`: the error's code, which `on-error` routes on.
pub fn failure_code(code: &str) -> Result<(), String> {
    if code.is_empty() {
        return Err("`error.code` must not be empty: `on-error` routes on it".into());
    }
    Ok(())
}

/// `POST /v1/tasks/{id}/extend`: the lock's new length.
pub fn extension(lock: &str) -> Result<SignedDuration, String> {
    lock_duration("lock", lock)
}

fn check_worker(worker: &str) -> Result<(), String> {
    if worker.trim().is_empty()
        || worker.len() > WORKER_BYTES_MAX
        || worker.contains(char::is_control)
    {
        return Err(format!(
            "`worker` must name the worker: 1 to {WORKER_BYTES_MAX} bytes, no control \
             characters"
        ));
    }
    Ok(())
}

/// Every topic must be one a task can have: a poll for any other could never be answered.
fn check_topics(topics: &[String]) -> Result<(), String> {
    if topics.is_empty() || topics.len() > POLL_TOPICS_MAX {
        return Err(format!(
            "`topics` must list 1 to {POLL_TOPICS_MAX} topics, not {}",
            topics.len()
        ));
    }
    match topics.iter().find(|topic| !check::is_task_topic(topic)) {
        Some(topic) => {
            let shown: String = topic.chars().take(64).collect();
            Err(format!(
                "`topics` names {shown:?}, which no task can have: {}",
                check::TASK_TOPIC_HINT
            ))
        }
        None => Ok(()),
    }
}

fn duration(field: &str, text: &str) -> Result<SignedDuration, String> {
    parse_duration(text).map_err(|error| format!("`{field}`: {error}; {}", error.hint()))
}

/// A lock must last a while, or the task would be available again before the answer arrives.
fn lock_duration(field: &str, text: &str) -> Result<SignedDuration, String> {
    let lock = duration(field, text)?;
    if lock.is_zero() {
        return Err(format!("`{field}` must be longer than zero, such as PT1M"));
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Body {
        worker: String,
        max: u32,
    }

    #[test]
    fn a_body_that_does_not_fit_names_the_field_and_a_nul_names_its_pointer() {
        let error = json::<Body>(br#"{"worker": "w", "max": -1}"#).unwrap_err();
        assert!(error.starts_with("`max`: "), "{error}");
        let error = json::<Body>(b"[").unwrap_err();
        assert!(error.starts_with("the body: "), "{error}");
        let error = json::<Body>(br#"{"worker": "w\u0000", "max": 1}"#).unwrap_err();
        assert!(
            error.starts_with("`/worker`: contains the character"),
            "{error}"
        );
    }

    #[test]
    fn a_poll_names_its_worker_and_real_topics_and_asks_for_a_lock_longer_than_zero() {
        let topics = ["charge".to_owned()];
        let terms = poll("w-1", &topics, 1, Some("PT1M"), None).unwrap();
        assert_eq!(terms.lock, Some(SignedDuration::from_secs(60)));
        assert_eq!(terms.wait, SignedDuration::ZERO);
        for (worker, topics, max, lock) in [
            (" ", &topics[..], 1, None),
            ("w\n", &topics[..], 1, None),
            ("w", &[][..], 1, None),
            ("w", &["No Topic".to_owned()][..], 1, None),
            ("w", &topics[..], 0, None),
            ("w", &topics[..], 1, Some("PT0S")),
            ("w", &topics[..], 1, Some("1 minute")),
        ] {
            assert!(
                poll(worker, topics, max, lock, None).is_err(),
                "{worker:?} {topics:?}"
            );
        }
        assert!(
            take("w", &topics, Some("PT0S"))
                .unwrap_err()
                .contains("`take.lock`")
        );
        assert!(batch(101, 100).is_err());
        assert!(failure_code("").is_err());
        assert!(extension("P1M").is_err());
    }
}
