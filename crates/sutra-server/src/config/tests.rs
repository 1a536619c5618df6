use super::*;

#[test]
fn environment_overrides_defaults_and_flags_override_environment() {
    let env = vec![("SUTRA_INSTANCE_CLAIM_TIMEOUT".to_owned(), "PT2S".to_owned())];
    let settings = Sources::defaults()
        .environment(env.clone())
        .settings()
        .unwrap();
    assert_eq!(settings.engine.claim_timeout, SignedDuration::from_secs(2));
    let settings = Sources::defaults()
        .environment(env)
        .flag("sutra.instance.claim-timeout", Some("PT3S"))
        .settings()
        .unwrap();
    assert_eq!(settings.engine.claim_timeout, SignedDuration::from_secs(3));
}

#[test]
fn a_bad_value_names_its_key_and_where_it_came_from() {
    let env = vec![("SUTRA_ENGINE_LANES".to_owned(), "zero".to_owned())];
    let error = Sources::defaults()
        .environment(env)
        .settings()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("sutra.engine.lanes") && error.contains("$SUTRA_ENGINE_LANES"),
        "{error}"
    );
}

#[test]
fn the_several_holders_marker_is_no_replicas_id() {
    let error = Sources::defaults()
        .flag("sutra.replica-id", Some("*"))
        .settings()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("sutra.replica-id") && error.contains("several replicas"),
        "{error}"
    );
    let named = Sources::defaults()
        .flag("sutra.replica-id", Some("replica-a"))
        .settings()
        .unwrap();
    assert_eq!(named.engine.replica_id, "replica-a");
}

#[test]
fn env_names_derive_from_keys() {
    assert_eq!(
        env_name("sutra.instance.claim-timeout"),
        "SUTRA_INSTANCE_CLAIM_TIMEOUT"
    );
}

const TOKEN: &str = "acme-admin-0123456789abcdef";

#[test]
fn tokens_come_from_the_key_or_from_a_file_not_both() {
    let env = vec![
        (
            "SUTRA_AUTH_TOKENS".to_owned(),
            format!("acme:admin:{TOKEN}"),
        ),
        ("SUTRA_AUTH_TOKENS_FILE".to_owned(), "/nowhere".to_owned()),
    ];
    let error = Sources::defaults().environment(env).settings().unwrap_err();
    let error = error.to_string();
    assert!(error.contains("not both"), "{error}");
    assert!(!error.contains(TOKEN), "{error}");
}

#[test]
fn tokens_mean_the_same_from_sutra_yaml_and_from_one_environment_variable() {
    let file = std::env::temp_dir().join(format!("sutra-config-{}.yaml", std::process::id()));
    let yaml = format!(
        "sutra:\n  auth:\n    tokens:\n      - tenant: acme\n        roles: [admin, worker]\n        token: {TOKEN}\n"
    );
    std::fs::write(&file, yaml).unwrap();
    let from_file = Sources::defaults().file(&file).unwrap().settings();
    std::fs::remove_file(&file).unwrap();
    let env = vec![(
        "SUTRA_AUTH_TOKENS".to_owned(),
        format!("acme:admin,worker:{TOKEN}"),
    )];
    let from_env = Sources::defaults().environment(env).settings();

    let from_file = from_file
        .unwrap()
        .auth_tokens
        .expect("tokens from the file");
    assert_eq!(Some(from_file), from_env.unwrap().auth_tokens);
}

#[test]
fn a_bad_token_entry_is_named_and_the_value_is_not_shown() {
    let env = vec![(
        "SUTRA_AUTH_TOKENS".to_owned(),
        format!("acme:admin:{TOKEN}; globex:janitor:{TOKEN}x"),
    )];
    let error = Sources::defaults()
        .environment(env)
        .settings()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("sutra.auth.tokens")
            && error.contains("$SUTRA_AUTH_TOKENS")
            && error.contains("entry 2 (tenant `globex`): unknown role `janitor`"),
        "{error}"
    );
    assert!(!error.contains(TOKEN), "{error}");
}

#[test]
fn a_lease_poll_of_half_the_ttl_or_more_is_refused() {
    let env = |ttl: &str, poll: &str| {
        vec![
            ("SUTRA_LEASE_TTL".to_owned(), ttl.to_owned()),
            ("SUTRA_LEASE_POLL".to_owned(), poll.to_owned()),
        ]
    };
    let error = Sources::defaults()
        .environment(env("PT10S", "PT5S"))
        .settings()
        .unwrap_err()
        .to_string();
    assert!(error.contains("sutra.lease.poll"), "{error}");
    let settings = Sources::defaults()
        .environment(env("PT3S", "PT1S"))
        .settings()
        .unwrap();
    assert_eq!(
        (settings.engine.lease_ttl, settings.engine.lease_poll),
        (SignedDuration::from_secs(3), SignedDuration::from_secs(1))
    );
}

/// The message a start with `variables` set is refused with.
fn refusal(variables: &[(&str, &str)]) -> String {
    let variables = variables
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()));
    Sources::defaults()
        .environment(variables)
        .settings()
        .unwrap_err()
        .to_string()
}

#[test]
fn zero_lanes_are_refused_naming_the_key_and_its_origin() {
    let error = refusal(&[("SUTRA_ENGINE_LANES", "0")]);
    assert!(
        error.contains("`sutra.engine.lanes` = `0` (from $SUTRA_ENGINE_LANES)"),
        "{error}"
    );
}

#[test]
fn a_claim_timeout_no_longer_than_the_group_window_is_refused() {
    let error = refusal(&[
        ("SUTRA_ENGINE_GROUP_WINDOW", "PT1S"),
        ("SUTRA_INSTANCE_CLAIM_TIMEOUT", "PT1S"),
    ]);
    assert!(
        error.contains(
            "`sutra.instance.claim-timeout` = `PT1S` (from $SUTRA_INSTANCE_CLAIM_TIMEOUT)"
        ) && error.contains("sutra.engine.group.window"),
        "{error}"
    );
    let settings = Sources::defaults()
        .flag("sutra.engine.group.window", Some("PT1S"))
        .flag("sutra.instance.claim-timeout", Some("PT2S"))
        .settings()
        .unwrap();
    assert_eq!(settings.engine.claim_timeout, SignedDuration::from_secs(2));
}

#[test]
fn an_unknown_key_in_the_file_is_refused_naming_it_and_the_file() {
    let file = std::env::temp_dir().join(format!("sutra-unknown-{}.yaml", std::process::id()));
    std::fs::write(&file, "sutra:\n  instance:\n    claim-timout: PT1M\n").unwrap();
    let refused = Sources::defaults().file(&file).map(|_| ());
    std::fs::remove_file(&file).unwrap();
    let error = refused.unwrap_err().to_string();
    assert!(
        error.contains("unknown configuration key `sutra.instance.claim-timout`")
            && error.contains(&file.display().to_string())
            && error.contains("sutra.instance.claim-timeout"),
        "{error}"
    );
}

#[test]
fn debug_shows_no_datasource_password() {
    let settings = Sources::defaults()
        .flag("sutra.datasource", Some("postgres://app:s3cret@db/sutra"))
        .flag(
            "sutra.store.migrate-url",
            Some("postgres://owner:0wner-pw@db/sutra"),
        )
        .flag(
            "sutra.store.system-url",
            Some("postgres://db/sutra?user=system&password=sys-pw"),
        )
        .settings()
        .unwrap();
    let shown = format!("{settings:?}");
    for secret in ["s3cret", "0wner-pw", "sys-pw"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert!(shown.contains("postgres://app:***@db/sutra"), "{shown}");
}

#[test]
fn a_zero_outbox_backoff_is_refused() {
    let env = vec![("SUTRA_OUTBOX_BACKOFF".to_owned(), "PT0S".to_owned())];
    let error = Sources::defaults().environment(env).settings().unwrap_err();
    assert!(
        error.to_string().contains("sutra.outbox.backoff"),
        "{error}"
    );
    let settings = Sources::defaults().settings().unwrap();
    assert_eq!(settings.engine.outbox_backoff, SignedDuration::from_secs(1));
}

#[test]
fn the_http_server_runs_with_its_documented_timeouts_and_a_cap_the_file_limit_holds() {
    let http = Sources::defaults().settings().unwrap().http;
    assert_eq!(
        (http.header_timeout, http.idle_timeout, http.body_timeout),
        (
            SignedDuration::from_secs(10),
            SignedDuration::from_secs(60),
            SignedDuration::from_secs(30)
        )
    );
    let reserve = connections::descriptors::Reserve {
        datasource: "sqlite://sutra.db",
        pool_size: 10,
        system_pool: false,
        outbox_batch: 100,
        brokers: 0,
    };
    let derived = Descriptors::of_this_process(reserve.descriptors()).derived_cap();
    assert_eq!(Ok(http.max_connections), derived);
}

#[test]
fn a_zero_http_timeout_is_refused_naming_its_key() {
    let error = refusal(&[("SUTRA_HTTP_IDLE_TIMEOUT", "PT0S")]);
    assert!(
        error.contains("`sutra.http.idle-timeout` = `PT0S` (from $SUTRA_HTTP_IDLE_TIMEOUT)")
            && error.contains("greater than zero"),
        "{error}"
    );
}

#[test]
fn a_connection_cap_beyond_the_file_limit_is_refused_naming_what_fits() {
    // More than any Linux file-descriptor limit can be.
    let error = refusal(&[("SUTRA_HTTP_MAX_CONNECTIONS", "4294967295")]);
    assert!(
        error.contains("`sutra.http.max-connections` = `4294967295`")
            && error.contains("RLIMIT_NOFILE")
            && error.contains("set at most"),
        "{error}"
    );
    let error = refusal(&[("SUTRA_HTTP_MAX_CONNECTIONS", "0")]);
    assert!(error.contains("greater than 0"), "{error}");
}

#[test]
fn the_lock_ceiling_defaults_to_an_hour_and_must_be_a_positive_duration() {
    let settings = Sources::defaults().settings().unwrap();
    assert_eq!(settings.engine.task_max_lock, SignedDuration::from_hours(1));
    let settings = Sources::defaults()
        .flag("sutra.tasks.max-lock", Some("PT2S"))
        .settings()
        .unwrap();
    assert_eq!(settings.engine.task_max_lock, SignedDuration::from_secs(2));
    for (value, reason) in [
        ("PT0S", "greater than zero"),
        ("-PT1M", ""),
        ("an hour", ""),
    ] {
        let error = refusal(&[("SUTRA_TASKS_MAX_LOCK", value)]);
        assert!(
            error.contains(&format!(
                "`sutra.tasks.max-lock` = `{value}` (from $SUTRA_TASKS_MAX_LOCK)"
            )) && error.contains(reason),
            "{error}"
        );
    }
}
