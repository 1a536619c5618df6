use super::*;
use serde_json::json;

fn vars(value: &Value) -> Bindings<'_> {
    Bindings::new().json("vars", value)
}

/// An expression answers over the parts it reads exactly what it answers over the whole.
#[test]
fn an_evaluation_binds_only_what_the_expression_reads_and_answers_the_same() {
    let vars = json!({
        "a": {"b": 1, "c": {"d": 2}},
        "list": [1, 2, 3],
        "big": {"x": 1},
        "flag": true,
    });
    let cases = [
        ("vars.a.b + vars.a.c.d", json!(3)),
        ("vars.a.c", json!({"d": 2})),
        ("vars.a.c.d + size(vars.a)", json!(4)),
        (
            "has(vars.a.b) && !has(vars.a.z) && !has(vars.nope)",
            json!(true),
        ),
        ("size(vars)", json!(4)),
        ("vars['flag'] && vars.flag", json!(true)),
        ("vars.list.map(vars, vars * 2)", json!([2, 4, 6])),
        ("vars.list.exists(x, x == vars.a.b)", json!(true)),
        ("[vars.big].map(v, v.x)[0]", json!(1)),
        ("vars == vars", json!(true)),
    ];
    for (source, expected) in cases {
        let expr = Expr::compile(source, INSTANCE_ROOTS).unwrap();
        assert_eq!(
            expr.eval(&Bindings::new().json("vars", &vars)).unwrap(),
            expected,
            "{source}"
        );
    }
    let missing = Expr::compile("vars.a.z", INSTANCE_ROOTS).unwrap();
    assert!(missing.eval(&Bindings::new().json("vars", &vars)).is_err());
}

#[test]
fn what_an_expression_reads_is_its_paths_from_each_free_name() {
    let reads = |source: &str| {
        let expr = Expr::compile(source, INSTANCE_ROOTS).unwrap();
        (*expr.reads).clone()
    };
    let fields = |entries: Vec<(&str, Reads)>| {
        Reads::Fields(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        )
    };
    assert_eq!(
        reads("vars.a.b + vars.c"),
        [(
            "vars".to_owned(),
            fields(vec![
                ("a", fields(vec![("b", Reads::Whole)])),
                ("c", Reads::Whole)
            ])
        )]
        .into()
    );
    assert_eq!(
        reads("vars.a.b == vars.a"),
        [("vars".to_owned(), fields(vec![("a", Reads::Whole)]))].into()
    );
    assert_eq!(
        reads("size(vars) > 0 && vars.a"),
        [("vars".to_owned(), Reads::Whole)].into()
    );
    assert_eq!(
        reads("[1].map(vars, vars + 1)[0] == msg.data.n && now > now"),
        [
            (
                "msg".to_owned(),
                fields(vec![("data", fields(vec![("n", Reads::Whole)]))])
            ),
            ("now".to_owned(), Reads::Whole),
        ]
        .into(),
        "a comprehension's own `vars` is not the instance's"
    );
}

#[test]
fn guard_reads_variables() {
    let guard = Expr::compile("vars.input.amount > 10000", INSTANCE_ROOTS).unwrap();
    assert!(
        guard
            .eval_bool(&vars(&json!({"input": {"amount": 20000}})))
            .unwrap()
    );
    assert!(
        !guard
            .eval_bool(&vars(&json!({"input": {"amount": 5}})))
            .unwrap()
    );
}

#[test]
fn a_result_holding_nul_is_an_evaluation_error() {
    for source in [r"'a\u0000b'", r"{'k\x00': 1}", r"['ok', '\000']"] {
        let expr = Expr::compile(source, INSTANCE_ROOTS).unwrap();
        let error = expr.eval(&Bindings::new()).unwrap_err();
        assert!(error.message.contains("NUL"), "{source}: {error}");
    }
}

#[test]
fn runtime_failures_are_errors_not_panics() {
    for source in [
        "1 / 0",
        "9223372036854775807 + 1",
        "vars.missing.field",
        "'a' + 1",
    ] {
        let expr = Expr::compile(source, INSTANCE_ROOTS).unwrap();
        assert!(expr.eval(&vars(&json!({}))).is_err(), "{source}");
    }
}

#[test]
fn deep_nesting_is_refused_before_it_can_overflow_the_stack() {
    let deep = "(".repeat(5000) + "1" + &")".repeat(5000);
    assert!(matches!(
        Expr::compile(&deep, INSTANCE_ROOTS),
        Err(CompileError::TooLong(_))
    ));
    let deep = "[".repeat(100) + "1" + &"]".repeat(100);
    assert_eq!(
        Expr::compile(&deep, INSTANCE_ROOTS).unwrap_err(),
        CompileError::TooDeep
    );
    let chain = "1".to_string() + &" + 1".repeat(200);
    assert_eq!(
        Expr::compile(&chain, INSTANCE_ROOTS).unwrap_err(),
        CompileError::TooDeep
    );
}

/// Found by hand while the fuzz targets were written (decision 0042): six `map`s nested over
/// ten-element lists took 14 s, and each level more ten times as long.
#[test]
fn nested_loops_are_refused_before_they_multiply_the_work() {
    let digits = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]";
    let nested = |levels: usize| {
        let mut source = "0".to_owned();
        for level in 0..levels {
            source = format!("{digits}.map(x{level}, {source})");
        }
        source
    };
    let deepest = Expr::compile(&nested(EXPRESSION_LOOPS_DEPTH_MAX), INSTANCE_ROOTS).unwrap();
    let value = deepest.eval(&Bindings::new()).unwrap();
    assert_eq!(value[9][9], json!(0));
    for levels in [EXPRESSION_LOOPS_DEPTH_MAX + 1, 6, 10] {
        assert_eq!(
            Expr::compile(&nested(levels), INSTANCE_ROOTS).unwrap_err(),
            CompileError::LoopsTooDeep,
            "{levels} levels"
        );
    }
    // A loop in another's list runs once, not once per element: only the body nests.
    let chained = format!("{digits}.map(a, a).filter(b, b > 1).exists(c, {digits}.all(d, d >= 0))");
    assert!(Expr::compile(&chained, INSTANCE_ROOTS).is_ok());
    let inner_in_body =
        format!("{digits}.exists(a, {digits}.exists(b, {digits}.all(c, a + b + c > 0)))");
    assert_eq!(
        Expr::compile(&inner_in_body, INSTANCE_ROOTS).unwrap_err(),
        CompileError::LoopsTooDeep
    );
}

#[test]
fn the_deepest_accepted_expression_evaluates_on_the_stack_given_to_evaluation() {
    let chain = "1".to_string() + &" + 1".repeat(EXPRESSION_TREE_DEPTH_MAX - 2);
    let expr = Expr::compile(&chain, INSTANCE_ROOTS).unwrap();
    let value = std::thread::Builder::new()
        .stack_size(EVALUATION_STACK_BYTES)
        .spawn(move || expr.eval(&Bindings::new()).unwrap())
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(value, json!(EXPRESSION_TREE_DEPTH_MAX - 1));
}

#[test]
fn unknown_names_are_refused_but_comprehension_variables_are_not() {
    let err = Expr::compile("varz.input", INSTANCE_ROOTS).unwrap_err();
    assert!(matches!(err, CompileError::UnknownName { ref name, .. } if name == "varz"));
    Expr::compile("vars.items.all(i, i.price > 0)", INSTANCE_ROOTS).unwrap();
    Expr::compile(
        "vars.items.map(i, i.price).exists(p, p > 3)",
        INSTANCE_ROOTS,
    )
    .unwrap();
}

#[test]
fn syntax_errors_have_a_position_and_a_plain_reason() {
    let detail = |source: &str| {
        Expr::compile(source, INSTANCE_ROOTS)
            .unwrap_err()
            .syntax_detail()
            .unwrap()
    };
    let early = detail("vars.a +");
    assert_eq!((early.line, early.column), (1, 9));
    assert_eq!(early.reason, "the expression ends too early");
    assert_eq!(detail("vars.a > > 1").reason, "unexpected `>`");
    assert_eq!(detail("vars.(").reason, "cannot make sense of `.(`");
    assert!(CompileError::TooDeep.syntax_detail().is_none());
}

#[test]
fn correlation_keys_are_strings_or_integers() {
    let key = Expr::compile("data.id", MESSAGE_ROOTS).unwrap();
    let at = |data: Value| key.eval_key(&Bindings::new().json("data", &data));
    assert_eq!(at(json!({"id": "t1"})).unwrap(), "t1");
    assert_eq!(at(json!({"id": 42})).unwrap(), "42");
    assert!(at(json!({"id": 1.5})).is_err());
    assert!(at(json!({"id": {"x": 1}})).is_err());
    let longest = "k".repeat(KEY_BYTES_MAX);
    assert_eq!(at(json!({"id": longest})).unwrap().len(), KEY_BYTES_MAX);
    let refused = at(json!({"id": format!("{longest}k")})).unwrap_err();
    assert!(refused.message.contains("at most 1024 bytes"), "{refused}");
}

#[test]
fn timestamps_render_as_rfc3339() {
    let expr = Expr::compile("now + duration('1h')", INSTANCE_ROOTS).unwrap();
    let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let value = expr.eval(&Bindings::new().timestamp("now", now)).unwrap();
    let at: jiff::Timestamp = value.as_str().unwrap().parse().unwrap();
    assert_eq!(at, "2026-01-01T01:00:00Z".parse().unwrap());
}

#[test]
fn leaves_starting_with_equals_are_expressions_and_double_equals_escapes() {
    assert!(matches!(
        classify_leaf("= vars.a"),
        Leaf::Expression(" vars.a")
    ));
    assert!(matches!(classify_leaf("==x"), Leaf::Literal(ref s) if s == "=x"));
    assert!(matches!(classify_leaf("plain"), Leaf::Literal(ref s) if s == "plain"));
}
