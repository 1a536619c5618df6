//! What `sutra serve` refuses to start with (docs/decisions/0044): a configuration the engine
//! cannot run with is refused before anything opens, naming the key, where its value came
//! from, and what to do.

use sutra_testkit::{Server, serve};

#[test]
fn a_claim_timeout_no_longer_than_the_group_window_refuses_the_start() {
    let options = serve!("sqlite::memory:")
        .env("SUTRA_ENGINE_GROUP_WINDOW", "PT0.5S")
        .env("SUTRA_INSTANCE_CLAIM_TIMEOUT", "PT0.5S");

    let refusal = Server::try_start(&options)
        .err()
        .expect("it must refuse to start");

    assert!(
        refusal.contains(
            "`sutra.instance.claim-timeout` = `PT0.5S` (from $SUTRA_INSTANCE_CLAIM_TIMEOUT)"
        ) && refusal.contains("lengthen the claim timeout or shorten the window"),
        "{refusal}"
    );
}

#[test]
fn a_delivery_ceiling_of_zero_attempts_refuses_the_start() {
    let options = serve!("sqlite::memory:").env("SUTRA_DELIVERIES_MAX_ATTEMPTS", "0");

    let refusal = Server::try_start(&options)
        .err()
        .expect("it must refuse to start");

    assert!(
        refusal.contains(
            "`sutra.deliveries.max-attempts` = `0` (from $SUTRA_DELIVERIES_MAX_ATTEMPTS)"
        ) && refusal.contains("greater than 0"),
        "{refusal}"
    );
}

#[test]
fn a_connection_cap_the_file_limit_cannot_hold_beside_the_store_refuses_the_start() {
    // 1,024 files, of which the store, the outbox's sends and the process keep up to 194.
    let options = serve!("sqlite::memory:")
        .file_limit(1024)
        .env("SUTRA_HTTP_MAX_CONNECTIONS", "1000");

    let refusal = Server::try_start(&options)
        .err()
        .expect("it must refuse to start");

    assert!(
        refusal
            .contains("`sutra.http.max-connections` = `1000` (from $SUTRA_HTTP_MAX_CONNECTIONS)")
            && refusal.contains("may open 1024 files")
            && refusal.contains("set at most 830"),
        "{refusal}"
    );
}
