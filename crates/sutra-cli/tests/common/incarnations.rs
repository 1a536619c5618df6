//! The processes of a crash test: one `sutra serve` after another on one database, each killed
//! by its fault point but the last, each at the lane count the test runs at, with the history
//! log on (decision 0043) and a replica id of its own — and the history checker over all of
//! them once the run has settled.

use serde_json::Value;
use sutra_testkit::{Server, ServerOptions};

use super::{Accepted, history};

/// A crash test's processes, in the order they started.
pub struct Incarnations {
    name: String,
    lanes: usize,
    started: Vec<(String, Server)>,
    /// The starts the test's callers were told were accepted.
    accepted: Vec<Accepted>,
}

impl Incarnations {
    /// None yet; each will be named `{name}-i{n}` and run `lanes` lanes.
    pub fn new(name: &str, lanes: usize) -> Incarnations {
        Incarnations {
            name: name.to_owned(),
            lanes,
            started: Vec::new(),
            accepted: Vec::new(),
        }
    }

    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// Starts the next process on `options`, at the test's lane count, recording its history.
    pub fn start(&mut self, options: &ServerOptions) -> &mut Server {
        let id = format!("{}-i{}", self.name, self.started.len());
        let options = (options.clone().lanes(self.lanes))
            .env("SUTRA_LOG", history::LOG_FILTER)
            .replica(&id);
        self.started.push((id, Server::start(&options)));
        self.last()
    }

    /// Starts the next process and deploys `yaml` on it.
    pub async fn deployed(&mut self, options: &ServerOptions, yaml: &str) -> &mut Server {
        let server = self.start(options);
        server.deploy_accepted(yaml).await;
        server
    }

    /// The process started last.
    pub fn last(&mut self) -> &mut Server {
        &mut self.started.last_mut().expect("a process was started").1
    }

    /// Records that the caller of a start (`event_id`) was answered `answer`, a 202: the
    /// checker proves that message started exactly that one instance.
    pub fn accepted(&mut self, event_id: &str, answer: &Value) {
        self.accepted.push(Accepted {
            event_id: event_id.to_owned(),
            transfer: String::new(),
            instance: answer["instance"].as_str().unwrap_or_default().to_owned(),
            dedup: answer["dedup"] == true,
            slot: 0,
            attempts: 1,
        });
    }

    /// Checks what every process recorded: one chain of commits per instance, no answer before
    /// its commit, every accepted start consumed once, each park answered once. Every process
    /// but the last was killed, so a line it may have died before writing is not an anomaly.
    /// Fails the test, naming the lane count, on any anomaly.
    pub fn assert_history_clean(&self) {
        let histories: Vec<history::Incarnation> = (self.started.iter())
            .map(|(replica, server)| history::Incarnation {
                replica: replica.clone(),
                stderr: server.stderr_text(),
            })
            .collect();
        let killed: Vec<String> = self.started[..self.started.len().saturating_sub(1)]
            .iter()
            .map(|(id, _)| id.clone())
            .collect();
        let report = history::check(&histories, &self.accepted, &[], &killed, &[], 0);
        println!("{} at {} lane(s): {report}", self.name, self.lanes);
        // A log filter that lost the history target would leave nothing to check, and pass.
        // Commits alone are not the sign: a burst that made one group, killed after its
        // `COMMIT`, leaves none recorded, and the restart answers every message as a duplicate.
        assert!(report.events > 0, "no history recorded: {report}");
        assert!(
            report.anomalies.is_empty(),
            "{} at {} lane(s): {report}",
            self.name,
            self.lanes
        );
    }
}
