//! The document states what the server enforces (decision 0062): each rule a request schema
//! carries is held to the server's own check, on values either side of it. Every value the
//! schema admits, the server takes; every value here the server refuses, the schema refuses too.
//! Read from the committed copy, which `sutra-cli`'s `tests/openapi.rs` holds to the served one.

use jsonschema::Validator;
use serde_json::{Value, json};
use sutra_core::request;
use sutra_core::snapshot::Status;
use sutra_store::TaskState;

const DOCUMENT: &str = include_str!("../../../../docs/openapi.json");

/// A validator of `schema`, whose `$ref`s reach the document's components.
fn validator(schema: Value) -> Validator {
    let document: Value = serde_json::from_str(DOCUMENT).expect("the document is JSON");
    let mut root = json!({"components": document["components"]});
    for (key, value) in schema.as_object().expect("a schema object") {
        root[key] = value.clone();
    }
    jsonschema::validator_for(&root).expect("the schema compiles")
}

/// A validator of component `name`'s member `member`.
fn member(name: &str, member: &str) -> Validator {
    let pointer = format!("/components/schemas/{name}/properties/{member}");
    let document: Value = serde_json::from_str(DOCUMENT).expect("the document is JSON");
    let schema = document.pointer(&pointer).cloned();
    validator(schema.unwrap_or_else(|| panic!("the document has no {pointer}")))
}

/// The schema and the server agree on `value`, where the schema takes it: the server takes it.
/// `refused` lists values the server refuses, which the schema must refuse too.
fn agree(schema: &Validator, accepts: impl Fn(&str) -> bool, taken: &[&str], refused: &[&str]) {
    for value in taken {
        assert!(
            schema.is_valid(&json!(value)),
            "the schema refuses {value:?}"
        );
        assert!(accepts(value), "the server refuses {value:?}");
    }
    for value in refused {
        assert!(!accepts(value), "the server takes {value:?}");
        assert!(
            !schema.is_valid(&json!(value)),
            "the schema takes {value:?}"
        );
    }
}

const TOO_LONG: &str = "P175307617DT1H";

#[test]
fn a_lock_is_a_duration_longer_than_zero_as_the_server_reads_it() {
    let server = |text: &str| request::extension(text).is_ok();
    let taken = [
        "PT1M",
        "PT30S",
        "PT0.5S",
        "PT0.000000001S",
        "P1D",
        "P2W",
        "P1W1D",
        "P1DT2H3M4.5S",
        "PT999999H999999M999999.999999999S",
        "P99999W999999DT999999H999999M999999.999999999S",
    ];
    let refused = [
        "PT0S", "P0D", "P", "PT", "P1DT", "P1M", "P1Y", "-PT1S", "1m", TOO_LONG,
    ];
    agree(&member("ExtendBody", "lock"), server, &taken, &refused);
    let poll = |text: &str| request::poll("w", &["t".into()], 1, Some(text), None).is_ok();
    agree(&member("PollBody", "lock"), poll, &taken, &refused);
    let take = |text: &str| request::take("w", &["t".into()], Some(text)).is_ok();
    agree(&member("Take", "lock"), take, &taken, &refused);
}

#[test]
fn a_wait_is_a_duration_and_may_be_zero() {
    let server = |text: &str| request::poll("w", &["t".into()], 1, None, Some(text)).is_ok();
    let taken = ["PT0S", "PT20S", "PT0.1S", "P1D"];
    let refused = ["P", "PT", "P1M", "-PT1S", "20s", TOO_LONG];
    agree(&member("PollBody", "wait"), server, &taken, &refused);
}

#[test]
fn a_worker_is_named_without_control_characters_and_not_only_whitespace() {
    let server = |worker: &str| request::poll(worker, &["t".into()], 1, None, None).is_ok();
    let longest = "w".repeat(200);
    let taken = [
        "w-1",
        "worker 7 on host",
        "ünïcode",
        " w ",
        longest.as_str(),
    ];
    let too_long = "w".repeat(201);
    let refused = [
        "",
        " ",
        "\t",
        "w\n",
        "w\u{0}",
        "w\u{85}",
        "\u{7f}",
        too_long.as_str(),
    ];
    agree(&member("PollBody", "worker"), server, &taken, &refused);
    agree(&member("Take", "worker"), server, &taken, &refused);
}

#[test]
fn topics_are_names_a_task_can_have_one_to_a_hundred() {
    let server = |topics: &[String]| request::poll("w", topics, 1, None, None).is_ok();
    let topics = |names: &[&str]| {
        names
            .iter()
            .map(|name| name.to_string())
            .collect::<Vec<_>>()
    };
    let longest = "t".repeat(200);
    let hundred = vec!["t".to_owned(); 100];
    let taken = [
        topics(&["debit-account"]),
        topics(&["a", "b.c", "d:e/f_g", "0"]),
        topics(&[&longest]),
        hundred.clone(),
    ];
    let too_long = format!("t{longest}");
    let mut hundred_and_one = hundred;
    hundred_and_one.push("t".into());
    let refused = [
        topics(&[]),
        topics(&["-a"]),
        topics(&["No Topic"]),
        topics(&["ü"]),
        topics(&[&too_long]),
        hundred_and_one,
    ];
    for schema in [member("PollBody", "topics"), member("Take", "topics")] {
        for list in &taken {
            assert!(schema.is_valid(&json!(list)) && server(list), "{list:?}");
        }
        for list in &refused {
            assert!(!schema.is_valid(&json!(list)) && !server(list), "{list:?}");
        }
    }
}

#[test]
fn a_failure_has_a_code_and_a_poll_asks_for_one_task_or_more() {
    let code = member("TaskFailure", "code");
    assert!(code.is_valid(&json!("DECLINED")) && request::failure_code("DECLINED").is_ok());
    assert!(!code.is_valid(&json!("")) && request::failure_code("").is_err());
    let max = member("PollBody", "max");
    assert!(max.is_valid(&json!(1)) && request::poll("w", &["t".into()], 1, None, None).is_ok());
    assert!(!max.is_valid(&json!(0)) && request::poll("w", &["t".into()], 0, None, None).is_err());
}

/// A listing's filters name what the store knows: the instance statuses any stored instance can
/// rest in, and every task state.
#[test]
fn the_filters_list_the_statuses_and_states_the_server_reads() {
    let statuses: Vec<&str> = sutra_wire::rules::INSTANCE_STATUSES.to_vec();
    let stored = [
        Status::Suspended,
        Status::Completed,
        Status::Cancelled,
        Status::Failed,
    ];
    assert_eq!(statuses, stored.map(Status::as_str));
    assert!(Status::parse("created").is_some() && !statuses.contains(&"created"));
    let states = sutra_wire::rules::TASK_STATES;
    assert!(states.iter().all(|state| TaskState::parse(state).is_some()));
    let bulk = validator(json!({"$ref": "#/components/schemas/BulkFilter"}));
    assert!(bulk.is_valid(&json!({"status": "failed", "created_after": "2026-12-01T00:00:00Z"})));
    assert!(!bulk.is_valid(&json!({"status": "created"})));
}

/// `to_version` goes with `migrate` and with no other action (`http::operations`).
#[test]
fn a_bulk_call_migrates_with_a_version_and_restores_or_cancels_without() {
    let body = validator(json!({"$ref": "#/components/schemas/BulkBody"}));
    for taken in [
        json!({"action": "migrate", "to_version": 2}),
        json!({"action": "restore"}),
        json!({"action": "cancel", "to_version": null, "filter": {"status": "failed"}}),
    ] {
        assert!(body.is_valid(&taken), "{taken}");
    }
    for refused in [
        json!({"action": "migrate"}),
        json!({"action": "restore", "to_version": 2}),
        json!({"action": "retry"}),
        json!({"action": "cancel", "limits": 5}),
    ] {
        assert!(!body.is_valid(&refused), "{refused}");
    }
}
