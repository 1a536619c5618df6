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
