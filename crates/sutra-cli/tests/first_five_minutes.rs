//! A newcomer's first command (`sutra demo`, the README's first command) runs to its end on a
//! machine with nothing set up, and shows transfers completing, one parked and one failed; with
//! RabbitMQ running, the parked one is approved over AMQP and completes too.

use std::process::{Command, Output};

fn demo(amqp_url: Option<&str>) -> (String, impl Fn(&str) -> String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sutra"));
    command.arg("demo").env("SUTRA_LOG", "warn");
    if let Some(url) = amqp_url {
        command.env("SUTRA_TRANSPORTS_AMQP_URL", url);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("run sutra demo");
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "sutra demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    let summary = stdout.clone();
    let status_of = move |transfer: &str| {
        summary
            .lines()
            .find(|line| line.starts_with(&format!("{transfer} ")))
            .and_then(|line| line.split_whitespace().nth(2))
            .unwrap_or_else(|| panic!("no summary row for {transfer}:\n{summary}"))
            .to_owned()
    };
    (stdout, status_of)
}

#[test]
fn the_demo_runs_to_its_end_and_the_bank_approves_the_large_transfer_over_amqp() {
    // RabbitMQ runs on this machine (.ci/run starts it).
    let (stdout, status_of) = demo(None);
    for transfer in ["t-1", "t-2", "t-3", "t-4"] {
        assert_eq!(status_of(transfer), "completed", "{stdout}");
    }
    assert_eq!(status_of("t-5"), "failed", "{stdout}");
    assert!(stdout.contains("bank  approves t-4"), "{stdout}");
    assert!(stdout.contains("received 4 entries"), "{stdout}");
    assert!(
        stdout.contains("sutra instances list"),
        "the demo says how to go on:\n{stdout}"
    );
}

#[test]
fn without_rabbitmq_the_demo_says_the_large_transfer_waits_for_a_reply_nobody_sends() {
    let (stdout, status_of) = demo(Some("amqp://guest:s3cret@127.0.0.1:1/%2f"));
    for transfer in ["t-1", "t-2", "t-3"] {
        assert_eq!(status_of(transfer), "completed", "{stdout}");
    }
    assert_eq!(status_of("t-4"), "suspended", "{stdout}");
    assert_eq!(status_of("t-5"), "failed", "{stdout}");
    assert!(
        stdout.contains("RabbitMQ is not reachable at amqp://guest:***@127.0.0.1:1"),
        "{stdout}"
    );
    assert!(stdout.contains("no bank answers"), "{stdout}");
    assert!(!stdout.contains("s3cret"), "{stdout}");
    assert!(stdout.contains("received 3 entries"), "{stdout}");
}
