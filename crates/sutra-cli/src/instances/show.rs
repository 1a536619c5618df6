//! `sutra instances show ID`: one instance as a readable block — status, failure, variables,
//! and what each token waits for.

use serde_json::Value;
use sutra_client::{Instance, Token};

use crate::output::{Table, fields, indented, one_line, pretty, time};
use crate::remote::{CommandError, Context, InstanceId};

/// Task inputs and join lists are summarised; `--json` has them whole.
const PARK_DETAIL_CHARS_MAX: usize = 60;

pub async fn run(instance: &InstanceId, context: Context) -> Result<(), CommandError> {
    let instance = context.client.instance(&instance.id).await?;
    context.print(&instance, human);
    Ok(())
}

pub(crate) fn human(instance: &Instance) -> String {
    let mut summary = vec![
        ("instance", instance.id.clone()),
        (
            "flow",
            format!(
                "{} (deployment {}, version {})",
                instance.flow, instance.deployment, instance.version
            ),
        ),
        ("status", instance.status.clone()),
    ];
    if let Some(failure) = &instance.failure {
        let at = match &failure.node {
            Some(node) => format!(" at node {node}"),
            None => String::new(),
        };
        summary.push((
            "failure",
            format!("{}{at}\n{}", failure.code, failure.detail),
        ));
    }
    summary.push(("created", time(&instance.created_at)));
    summary.push(("updated", time(&instance.updated_at)));
    format!(
        "{}\nvars:\n{}\ntokens:\n{}",
        fields(&summary),
        indented(&pretty(&instance.vars)),
        tokens(&instance.tokens)
    )
}

fn tokens(tokens: &[Token]) -> String {
    if tokens.is_empty() {
        return "  none\n".to_owned();
    }
    let mut table = Table::new(&["ID", "NODE", "STATE", "WAITS FOR"]);
    for token in tokens {
        table.row(vec![
            token.id.to_string(),
            token.node.clone(),
            token.state.clone(),
            token.park.as_ref().map(park).unwrap_or_default(),
        ]);
    }
    indented(&table.render())
}

/// What a park waits for, in words: "task debit-account", "message on payments with key o1".
pub(crate) fn park(park: &Value) -> String {
    let text = |name: &str| park[name].as_str().unwrap_or("?").to_owned();
    let until = |name: &str| match park[name].as_str() {
        Some(due) => format!(", until {}", time(due)),
        None => String::new(),
    };
    match park["kind"].as_str() {
        Some("task") => format!(
            "task {} (input {})",
            text("topic"),
            one_line(&park["input"], PARK_DETAIL_CHARS_MAX)
        ),
        Some("receive") => format!(
            "message on {} with key {}{}",
            text("channel"),
            text("key"),
            until("due")
        ),
        Some("wait") => format!("timer{}", until("due")),
        _ => match park.get("pending") {
            Some(pending) => format!("branches {}", one_line(pending, PARK_DETAIL_CHARS_MAX)),
            None => one_line(park, PARK_DETAIL_CHARS_MAX),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parks_read_as_what_they_wait_for() {
        assert_eq!(
            park(
                &json!({"id": 3, "kind": "task", "topic": "debit-account", "input": {"amount": 5}})
            ),
            r#"task debit-account (input {"amount":5})"#
        );
        assert_eq!(
            park(
                &json!({"id": 4, "kind": "receive", "channel": "payments", "key": "o1",
                "due": "2026-11-29T10:00:00.5Z"})
            ),
            "message on payments with key o1, until 2026-11-29T10:00:00Z"
        );
        assert_eq!(
            park(
                &json!({"id": 5, "kind": "receive", "channel": "payments", "key": "o1", "due": null})
            ),
            "message on payments with key o1"
        );
        assert_eq!(
            park(&json!({"id": 6, "kind": "wait", "due": "2026-11-29T10:00:00Z"})),
            "timer, until 2026-11-29T10:00:00Z"
        );
        assert_eq!(park(&json!({"pending": [2, 3]})), "branches [2,3]");
    }
}
