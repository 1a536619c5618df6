//! `sutra migrate ID --to-version N [--map OLD=NEW]...`: moves a `suspended` or `failed` instance
//! onto another version of its deployment (SPEC §7.4), then shows it as `sutra instances show`
//! does. A failed instance stays failed: `sutra restore ID` runs it on the new version.

use std::collections::BTreeMap;

use crate::instances::show;
use crate::remote::{CommandError, Context};

#[derive(clap::Args)]
pub struct Args {
    /// The instance's id.
    id: String,
    /// The version of the instance's deployment to move it onto.
    #[arg(long, value_name = "N")]
    to_version: u32,
    /// Where a token at node OLD goes in the new version (repeat for each node that moved); a
    /// node not named keeps its id.
    #[arg(long, value_name = "OLD=NEW", value_parser = node_pair)]
    map: Vec<(String, String)>,
}

pub async fn run(args: &Args, context: Context) -> Result<(), CommandError> {
    let map: BTreeMap<String, String> = args.map.iter().cloned().collect();
    let instance = context
        .client
        .migrate(&args.id, args.to_version, map)
        .await?;
    context.print(&instance, show::human);
    Ok(())
}

pub(crate) fn node_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((old, new)) if !old.is_empty() && !new.is_empty() => {
            Ok((old.to_owned(), new.to_owned()))
        }
        _ => Err(format!(
            "`{text}` is not OLD=NEW: name the node a token is at, `=`, and the node it goes to"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_entry_is_old_equals_new() {
        assert_eq!(node_pair("wait=await"), Ok(("wait".into(), "await".into())));
        assert!(node_pair("wait").unwrap_err().contains("OLD=NEW"));
        assert!(node_pair("=await").is_err());
    }
}
