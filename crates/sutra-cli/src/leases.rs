//! `sutra leases`: who leads which singleton role (SPEC §6) — the lease rows the fleet shares,
//! and what the replica that answered leads now.

use sutra_client::Leases;

use crate::output::{Table, time};
use crate::remote::{CommandError, Context};

pub async fn run(context: Context) -> Result<(), CommandError> {
    let leases = context.client.leases().await?;
    context.print(&leases, human);
    Ok(())
}

fn human(leases: &Leases) -> String {
    let table = if leases.items.is_empty() {
        "no leases: no replica has taken a role by lease (on the embedded SQLite store every \
         replica leads every role)\n"
            .to_owned()
    } else {
        let mut table = Table::new(&["ROLE", "HOLDER", "EXPIRES", "EPOCH"]);
        for lease in &leases.items {
            table.row(vec![
                lease.role.clone(),
                lease.holder.clone(),
                time(&lease.expires_at),
                lease.epoch.to_string(),
            ]);
        }
        table.render()
    };
    let leading = match leases.leading.as_slice() {
        [] => "no role".to_owned(),
        roles => roles.join(", "),
    };
    format!("{table}replica {} leads {leading}\n", leases.replica)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn leases(items: serde_json::Value, leading: &[&str]) -> Leases {
        serde_json::from_value(json!({
            "items": items, "next": null, "replica": "r-1", "leading": leading,
        }))
        .unwrap()
    }

    #[test]
    fn leases_are_a_table_followed_by_what_the_answering_replica_leads() {
        let listed = leases(
            json!([
                {"role": "timers", "holder": "r-1", "expires_at": "2026-11-29T10:00:30.5Z", "epoch": 3},
                {"role": "history-purger", "holder": "r-2", "expires_at": "2026-11-29T10:00:31Z", "epoch": 12},
            ]),
            &["timers"],
        );
        assert_eq!(
            human(&listed),
            "ROLE            HOLDER  EXPIRES               EPOCH\n\
             timers          r-1     2026-11-29T10:00:30Z  3\n\
             history-purger  r-2     2026-11-29T10:00:31Z  12\n\
             replica r-1 leads timers\n"
        );
    }

    #[test]
    fn without_leases_it_says_why_and_what_the_replica_leads() {
        let text = human(&leases(json!([]), &["history-purger", "timers"]));
        assert!(text.starts_with("no leases:"), "{text}");
        assert!(
            text.ends_with("replica r-1 leads history-purger, timers\n"),
            "{text}"
        );
    }
}
