//! What a bench run found, printed for people or as one JSON document.

use std::time::Duration;

use serde::Serialize;

use super::machine::Load;
use super::postgres::Activity;
use super::reference::{Cap, Reference};

#[derive(Debug, Serialize)]
pub struct Report {
    pub workload: &'static str,
    /// `in-process (embedded store)`, `in-process (PostgreSQL)`, `sutra serve replicas
    /// (PostgreSQL)` or the server's URL.
    pub engine: String,
    /// The engine's lanes (per replica); `None` against a running server, whose own setting
    /// holds.
    pub lanes: Option<usize>,
    /// How many engine processes served the run: 1 in process, N with `--replicas N`; `None`
    /// against a running server, which the bench cannot count.
    pub replicas: Option<usize>,
    pub clients: usize,
    /// `--rate`: instances started per second whatever was running (an open loop); `None`: each
    /// client started its next instance when its last one ended.
    pub rate: Option<f64>,
    pub instances_requested: u64,
    pub instances_completed: u64,
    /// The run hit `--max-seconds` before every requested instance completed.
    pub stopped_early: bool,
    pub seconds: f64,
    pub instances_per_second: f64,
    pub steps_per_second: f64,
    /// `fan-out`'s items; `None` for the other workloads.
    pub items: Option<Items>,
    pub latency: Latency,
    pub commits: Option<Commits>,
    /// WAL, heap-only updates and index entries over the same window as `commits`; `None`
    /// without PostgreSQL.
    pub writes: Option<Writes>,
    pub reference: Option<Reference>,
    /// Instances per second over the reference's commits per second.
    pub ratio: Option<f64>,
    /// The machine's CPU over the driving time; `None` where it cannot be read.
    pub machine: Option<Load>,
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub measured: &'static str,
    pub samples: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// A `fan-out` run counted by items (bodies) rather than instances.
#[derive(Debug, Serialize)]
pub struct Items {
    /// `--items`: items (task bodies) per instance.
    pub per_instance: u64,
    /// Completed instances × items per instance.
    pub completed: u64,
    pub per_second: f64,
    /// The commit delta over completed items; `None` without PostgreSQL or with none completed.
    pub commits_per_item: Option<f64>,
    /// The machine's CPU per completed item; `None` where it cannot be read.
    pub cpu_ms_per_item: Option<f64>,
    /// Items per second over the reference's commits per second.
    pub ratio: Option<f64>,
}

impl Items {
    pub fn new(
        per_instance: u64,
        completed: u64,
        seconds: f64,
        commits: Option<i64>,
        machine: Option<&Load>,
        ratio: Option<f64>,
    ) -> Items {
        // Item counts are far below 2^52: exact as floats.
        let done = (completed > 0).then_some(completed as f64);
        Items {
            per_instance,
            completed,
            per_second: completed as f64 / seconds,
            commits_per_item: commits.zip(done).map(|(total, done)| total as f64 / done),
            cpu_ms_per_item: machine
                .and_then(|machine| machine.cpu_ms_per_instance)
                .map(|per_instance_ms| per_instance_ms / per_instance as f64),
            ratio,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Commits {
    pub counted: &'static str,
    pub total: i64,
    pub per_second: f64,
    pub per_completed_instance: Option<f64>,
}

/// What the engine's writes cost PostgreSQL, over the window of the commit counter.
#[derive(Debug, Serialize)]
pub struct Writes {
    pub counted: &'static str,
    /// `pg_current_wal_lsn()` delta, cluster-wide.
    pub wal_bytes: i64,
    pub wal_bytes_per_completed_instance: Option<f64>,
    /// Σ `n_tup_upd` and Σ `n_tup_hot_upd` over the engine's database's tables.
    pub updates: i64,
    pub hot_updates: i64,
    /// `hot_updates` ÷ `updates`; `None` without updates.
    pub hot_ratio: Option<f64>,
    /// Σ over tables of (inserts + updates − heap-only updates) × the table's indexes.
    pub index_entries_estimated: i64,
    pub index_entries_per_completed_instance: Option<f64>,
    /// What `pg_stat_statements` counted in the engine's database; `None` where the server does
    /// not load it.
    pub statements: Option<StatementsPerInstance>,
}

/// `pg_stat_statements`' counts over the window, per completed instance.
#[derive(Debug, Serialize)]
pub struct StatementsPerInstance {
    pub counted: &'static str,
    pub statements: f64,
    pub plans: f64,
    pub executing_ms: f64,
    pub planning_ms: f64,
}

pub const STATEMENTS_COUNTED: &str = "pg_stat_statements of the engine's database over the \
     commit counter's window, per completed instance: statements run (BEGIN, SET and COMMIT \
     among them; nested ones such as foreign-key checks only with pg_stat_statements.track = \
     all), plans made (only with pg_stat_statements.track_planning = on), and the server's time \
     executing and planning them (waits included)";

impl Writes {
    pub fn new(activity: &Activity, completed: u64) -> Writes {
        // Counts far below 2^52: exact as floats.
        let done = (completed > 0).then_some(completed as f64);
        Writes {
            counted: WRITES_COUNTED,
            wal_bytes: activity.wal_bytes,
            wal_bytes_per_completed_instance: done.map(|done| activity.wal_bytes as f64 / done),
            updates: activity.updates,
            hot_updates: activity.hot_updates,
            hot_ratio: (activity.updates > 0)
                .then(|| activity.hot_updates as f64 / activity.updates as f64),
            index_entries_estimated: activity.index_entries,
            index_entries_per_completed_instance: done
                .map(|done| activity.index_entries as f64 / done),
            statements: activity.statements.zip(done).map(|(statements, done)| {
                StatementsPerInstance {
                    counted: STATEMENTS_COUNTED,
                    statements: statements.calls as f64 / done,
                    plans: statements.plans as f64 / done,
                    executing_ms: statements.exec_ms / done,
                    planning_ms: statements.plan_ms / done,
                }
            }),
        }
    }
}

pub const WRITES_COUNTED: &str = "over the commit counter's window: WAL bytes = \
     pg_current_wal_lsn() delta, cluster-wide (every database's WAL, not only the engine's); \
     updates and heap-only (HOT) updates = pg_stat_user_tables of the engine's database; index \
     entries estimated = Σ over its tables of (n_tup_ins + n_tup_upd − n_tup_hot_upd) × the \
     table's indexes (a partial index's rows outside its predicate counted too)";

pub const LATENCY_MEASURED: &str = "client-observed, per step: from the client action that makes a step due \
     (start message, task result, relay message) to its effect seen (next task handed to the \
     worker, send answered); includes HTTP and the worker's poll";

pub const COMMITS_COUNTED: &str = "pg_stat_database.xact_commit delta of the engine's database \
     between the deployment and the engine's stop (in-process) or a settling pause (server): \
     every transaction — steps, task polls and completions, delivery takes, leases, sweeps";

pub fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl Report {
    pub fn text(&self) -> String {
        let mut lines = vec![
            format!("workload              {}", self.workload),
            format!(
                "engine                {}{}",
                self.engine,
                self.lanes
                    .map(|lanes| format!(", lanes {lanes}"))
                    .unwrap_or_default()
            ),
            format!(
                "replicas              {}",
                self.replicas
                    .map_or("n/a (a running server)".to_owned(), |n| n.to_string())
            ),
            format!(
                "clients               {}{}",
                self.clients,
                self.rate
                    .map(|rate| format!(", instances started at {rate} per second (open loop)"))
                    .unwrap_or_default()
            ),
            format!(
                "instances             {} of {} completed in {:.2} s{}",
                self.instances_completed,
                self.instances_requested,
                self.seconds,
                if self.stopped_early {
                    " (stopped at --max-seconds)"
                } else {
                    ""
                }
            ),
            format!("instances/s           {:.1}", self.instances_per_second),
            format!("steps/s               {:.1}", self.steps_per_second),
        ];
        if let Some(items) = &self.items {
            lines.push(format!(
                "items/s               {:.1}  ({} items per instance, {} items completed)",
                items.per_second, items.per_instance, items.completed
            ));
        }
        lines.extend([format!(
            "step latency          p50 {}  p99 {}  ({} steps, client-observed)",
            ms(self.latency.p50_ms),
            ms(self.latency.p99_ms),
            self.latency.samples,
        )]);
        lines.push(match &self.commits {
            Some(commits) => format!(
                "commits/instance      {}  ({} commits, {:.0}/s, every transaction in the engine's database)",
                commits
                    .per_completed_instance
                    .map_or("n/a".to_owned(), |per| format!("{per:.2}")),
                commits.total,
                commits.per_second,
            ),
            None => "commits/instance      n/a (no PostgreSQL: pass --db)".to_owned(),
        });
        if let Some(writes) = &self.writes {
            lines.extend(writes.lines());
        }
        if let Some(items) = &self.items {
            lines.push(format!(
                "commits/item          {}",
                items
                    .commits_per_item
                    .map_or("n/a (no PostgreSQL: pass --db)".to_owned(), |per| format!(
                        "{per:.3}"
                    ))
            ));
        }
        lines.push(match &self.reference {
            Some(reference) => format!(
                "reference             {:.0} commits/s, p50 {:.1} ms, p99 {:.1} ms  (pgbench, one-row UPDATE + INSERT, {} clients, {} s: {})",
                reference.commits_per_second,
                reference.latency.p50_ms,
                reference.latency.p99_ms,
                reference.clients,
                reference.seconds,
                reference.command
            ),
            None => "reference             n/a (no PostgreSQL: pass --db)".to_owned(),
        });
        if let Some(cap) = self.reference.as_ref().and_then(|r| r.capped.as_ref()) {
            lines.push(capped(cap));
        }
        if let Some(ratio) = self.ratio {
            lines.push(format!(
                "ratio                 {ratio:.3} instances per reference commit{}",
                self.items
                    .as_ref()
                    .and_then(|items| items.ratio)
                    .map(|ratio| format!(", {ratio:.3} items"))
                    .unwrap_or_default()
            ));
        }
        if let Some(machine) = &self.machine {
            lines.push(format!(
                "machine CPU           {:.2} of {} cores busy, {} per instance  (every process on the machine)",
                machine.busy_cores,
                machine.cores,
                ms(machine.cpu_ms_per_instance),
            ));
            if let Some(per_item) = self.items.as_ref().and_then(|items| items.cpu_ms_per_item) {
                lines.push(format!("                      {per_item:.3} ms per item"));
            }
        }
        lines.join("\n") + "\n"
    }
}

impl Writes {
    fn lines(&self) -> [String; 4] {
        let per = |value: Option<f64>, digits: usize| {
            value.map_or("n/a".to_owned(), |value| format!("{value:.digits$}"))
        };
        [
            format!(
                "WAL bytes/instance    {}  ({:.1} MB, cluster-wide pg_current_wal_lsn delta)",
                per(self.wal_bytes_per_completed_instance, 0),
                self.wal_bytes as f64 / 1e6,
            ),
            format!(
                "HOT updates           {}  ({} of {} updates in the engine's database)",
                self.hot_ratio
                    .map_or("n/a".to_owned(), |ratio| format!("{:.1} %", ratio * 100.0)),
                self.hot_updates,
                self.updates,
            ),
            format!(
                "index entries/inst.   {}  (estimated: Σ (inserts + non-HOT updates) × the table's indexes)",
                per(self.index_entries_per_completed_instance, 1),
            ),
            match &self.statements {
                Some(counted) => format!(
                    "statements/instance   {:.1}  ({:.2} plans made; {:.3} ms executing, {:.3} ms planning; pg_stat_statements)",
                    counted.statements, counted.plans, counted.executing_ms, counted.planning_ms,
                ),
                None => "statements/instance   n/a (the server does not load pg_stat_statements)"
                    .to_owned(),
            },
        ]
    }
}

/// Why the reference ran on fewer clients than the bench's: the server's terms.
fn capped(cap: &Cap) -> String {
    format!(
        "reference capped      from {} clients: PostgreSQL's max_connections {}, less {} reserved, \
         {} in use, {} kept for the engine, 1 for pgbench's setup",
        cap.requested, cap.max_connections, cap.reserved, cap.in_use, cap.kept_for_engine
    )
}

fn ms(value: Option<f64>) -> String {
    value.map_or("n/a".to_owned(), |ms| format!("{ms:.1} ms"))
}
