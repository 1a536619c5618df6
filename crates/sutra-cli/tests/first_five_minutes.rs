//! A newcomer's first command (`sutra demo`, the README's first command) runs to its end on a
//! machine with nothing set up, and shows transfers completing, one parked and one failed.

use std::process::Command;

#[test]
fn the_demo_runs_to_its_end_and_shows_completed_transfers() {
    let output = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .arg("demo")
        .env("SUTRA_LOG", "warn")
        .output()
        .expect("run sutra demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "sutra demo failed:\n{stdout}\n{stderr}"
    );
    let status_of = |transfer: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(&format!("{transfer} ")))
            .and_then(|line| line.split_whitespace().nth(2))
            .unwrap_or_else(|| panic!("no summary row for {transfer}:\n{stdout}"))
            .to_owned()
    };
    for transfer in ["t-1", "t-2", "t-3"] {
        assert_eq!(status_of(transfer), "completed", "{stdout}");
    }
    assert_eq!(status_of("t-4"), "suspended", "{stdout}");
    assert_eq!(status_of("t-5"), "failed", "{stdout}");
    assert!(stdout.contains("received 3 entries"), "{stdout}");
    assert!(
        stdout.contains("sutra instances list"),
        "the demo says how to go on:\n{stdout}"
    );
}
