//! The task API's request bodies, as the server reads them: the JSON decoded into the wire type
//! (`sutra_core::request::json`, NUL refused), then the checks its route applies before the
//! engine sees anything. The first byte picks the route; the rest is the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sutra_core::request;
use sutra_wire::{
    COMPLETE_BATCH_MAX, CompleteBody, CompleteItem, ExtendBody, FailBody, PollBody, ReleaseBody,
};

fuzz_target!(|data: &[u8]| {
    let Some((&route, body)) = data.split_first() else {
        return;
    };
    match route % 6 {
        // POST /v1/tasks/poll
        0 => {
            if let Ok(poll) = request::json::<PollBody>(body) {
                let terms = request::poll(
                    &poll.worker,
                    &poll.topics,
                    poll.max,
                    poll.lock.as_deref(),
                    poll.wait.as_deref(),
                );
                if let Ok(terms) = terms {
                    assert!(terms.lock.is_none_or(|lock| lock.is_positive()));
                    assert!(!terms.wait.is_negative());
                }
            }
        }
        // POST /v1/tasks/{id}/complete
        1 => {
            let _ = request::json::<CompleteBody>(body);
        }
        // POST /v1/tasks/complete
        2 => {
            if let Ok(items) = request::json::<Vec<CompleteItem>>(body)
                && request::batch(items.len(), COMPLETE_BATCH_MAX).is_ok()
            {
                for take in items.iter().filter_map(|item| item.take.as_ref()) {
                    let lock = request::take(&take.worker, &take.topics, take.lock.as_deref());
                    if let Ok(lock) = lock {
                        assert!(lock.is_none_or(|lock| lock.is_positive()));
                    }
                }
            }
        }
        // POST /v1/tasks/{id}/fail
        3 => {
            if let Ok(fail) = request::json::<FailBody>(body) {
                let _ = request::failure_code(&fail.error.code);
            }
        }
        // POST /v1/tasks/{id}/release
        4 => {
            let _ = request::json::<ReleaseBody>(body);
        }
        // POST /v1/tasks/{id}/extend
        _ => {
            if let Ok(extend) = request::json::<ExtendBody>(body)
                && let Ok(lock) = request::extension(&extend.lock)
            {
                assert!(lock.is_positive());
            }
        }
    }
});
