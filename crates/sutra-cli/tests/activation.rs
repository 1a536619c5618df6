//! End to end: activation (SPEC §6, §7.1) at several lanes. A version is served only once every
//! lane has loaded it, on both of its paths — a deploy through this replica, and one made
//! through another that this replica converges to — so a start answered right after the new
//! version is served runs on the new version whichever lane its instance falls on, and is never
//! refused for a version its lane does not have.

use std::time::Duration;

use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, serve, until};

const LANES: usize = 4;
/// Enough starts that every lane gets some: the instance id picks the lane.
const STARTS: usize = 16;
const VERSIONS: u32 = 4;

/// Version `version` of a deployment whose instances answer with the version they ran on and
/// the document they came from.
fn stamps(version: u32) -> String {
    format!(
        r#"
name: stamps
channels:
  stamps: {{ transport: http, correlate: data.id, ack: complete, ack-timeout: PT30S }}
flows:
  stamp:
    start: {{ channel: stamps }}
    nodes:
      - id: done
        end: {{ reply: {{ version: "= instance.version", document: {version} }} }}
"#
    )
}

/// Starts an instance; the answer.
async fn stamp(server: &Server, id: &str) -> (u16, Value) {
    server.send("stamps", id, json!({"id": id})).await
}

#[tokio::test]
async fn a_start_right_after_a_deploy_runs_on_the_new_version_on_every_lane() {
    let scratch = Scratch::new("activation-deploy");
    let server = Server::start(&serve!(scratch.database()).lanes(LANES));
    for version in 1..=VERSIONS {
        server.deploy_accepted(&stamps(version)).await;
        let server = &server;
        let starts = (0..STARTS).map(|n| {
            let id = format!("v{version}-{n}");
            async move { (stamp(server, &id).await, id) }
        });
        for ((status, body), id) in futures_util::future::join_all(starts).await {
            assert_eq!(
                (status, &body),
                (200, &json!({"version": version, "document": version})),
                "start {id}, right after version {version} was deployed: {body}"
            );
        }
    }
}

#[tokio::test]
async fn a_replica_converging_to_a_version_deployed_elsewhere_serves_it_on_every_lane() {
    // Two processes on one embedded store converge by its poll, here every half second.
    let scratch = Scratch::new("activation-converge");
    let options = serve!(scratch.database())
        .lanes(LANES)
        .leases(Duration::from_secs(3), Duration::from_millis(500));
    let deploying = Server::start(&options);
    let converging = Server::start(&options);
    for version in 1..=VERSIONS {
        deploying.deploy_accepted(&stamps(version)).await;
        // Every start answers, on the version before until the new one is served, and from
        // then on on the new one, whichever lane takes it.
        let mut round = 0;
        until(&format!("version {version} is served"), async || {
            round += 1;
            let starts = (0..STARTS).map(|n| {
                let id = format!("v{version}-{round}-{n}");
                let converging = &converging;
                async move { (stamp(converging, &id).await, id) }
            });
            let answers = futures_util::future::join_all(starts).await;
            let mut served = Vec::new();
            for ((status, body), id) in answers {
                if version == 1 && body["code"] == "SUTRA.INTAKE.CHANNEL.UNKNOWN" {
                    continue;
                }
                assert_eq!(status, 200, "start {id} during version {version}: {body}");
                let ran = body["version"].as_u64().unwrap();
                assert!(
                    ran == u64::from(version) || ran + 1 == u64::from(version),
                    "start {id} ran on version {ran} during version {version}: {body}"
                );
                served.push(ran == u64::from(version));
            }
            !served.is_empty() && served.iter().all(|new| *new)
        })
        .await;
    }
}
