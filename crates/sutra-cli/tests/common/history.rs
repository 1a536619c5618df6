//! The history checker (issue 17, decision 0043): proves properties of a run from what each
//! replica recorded it did (the engine's history log, `sutra::history`), and from what the
//! clients were told — not from the end state.
//!
//! - **One chain per instance**: no two commits under one fence; fences strictly increasing
//!   along the chain; the audit-sequence ranges of its commits, in fence order, contiguous from 1
//!   with no gap and no overlap.
//! - **Reply implies committed**: a caller answered as accepted (not a duplicate) was answered
//!   after the commit that consumed its message, in the answering process's own sequence; an
//!   answer naming an instance with no commit recorded anywhere is an anomaly.
//! - **One leader per lease role**: no two replicas hold a role in overlapping terms (each term
//!   from the answer that began it to its last local deadline, or its end), none holds one epoch
//!   another held, and epochs grow from one holder to the next.
//! - **Consumed once**: every message a client had accepted started exactly one instance — one
//!   `start` commit of its event id — whether it was answered as consumed or as a duplicate.
//! - **Each park answered once**: no two commits of an instance answer one park — no task
//!   completion, timer or message taken twice.
//! - **Completions consumed**: every completion a worker was answered as done was consumed by a
//!   commit answering its task's park, in place or as a delivery; no task was answered as
//!   completed under two different locks.
//! - **One lock at a time**: no two of a task's locks were held at once (each lock from its
//!   answer to its expiry, as extended, or to a database crash that may have lost it unflushed),
//!   and none was granted after the task's completion was answered. A lock ended early by a failure or a release is left out: when its end fell, in
//!   the database's order, the records cannot say. No lock answered to a worker was handed back
//!   as locked for a poll that went away (`task_unheard`).
//! - **Asked is taken or resolved** (SPEC §5.6): every task or timer a commit armed was answered
//!   or disarmed by a later commit of its instance, or the instance ended or failed. The runs
//!   checked are settled: every instance has come to rest.
//! - **Outbox rows sent**: every outbox row a commit wrote was recorded sent by a replica or
//!   heard by the receiver, and every key recorded sent or heard was written by a commit.
//!
//! - **The language's own parks** (issue 48): a call's park counts as asked, answered when its
//!   child's end is delivered; every child a commit called ran (has a commit of its own), and its
//!   end was reported to its parent once, for a call that parent made; no instance ended by two
//!   commits; no completion compensated twice; no message — a schedule's tick included — started
//!   two instances.
//!
//! A group whose `COMMIT` failed records its members' commits as `commit_unknown`: it may have
//! landed with its answer lost. Such a commit counts as landed when what followed shows it did
//! (see [`landed`]).
//!
//! A replica killed with SIGKILL may die between a commit and the line recording it: a gap, a
//! message consumed with no start recorded, a completion or an asked row with no commit taking
//! it, an outbox key never recorded, is then listed as unrecorded rather than as an anomaly,
//! unless no incarnation was killed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde_json::Value;

use super::Accepted;

/// The log filter a checked replica runs with: warnings, and the history log.
pub const LOG_FILTER: &str = "warn,sutra::history=info";

/// One process's stderr, and its replica id.
pub struct Incarnation {
    pub replica: String,
    pub stderr: String,
}

/// One history event, as recorded.
#[derive(Debug, Clone)]
pub struct Event(pub Value);

impl Event {
    fn str(&self, field: &str) -> Option<&str> {
        self.0[field].as_str()
    }
    fn int(&self, field: &str) -> Option<i64> {
        self.0[field].as_i64()
    }
    fn kind(&self) -> &str {
        self.str("ev").unwrap_or_default()
    }
    fn replica(&self) -> &str {
        self.str("replica").unwrap_or_default()
    }
    fn seq(&self) -> i64 {
        self.int("seq").unwrap_or_default()
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Something the history shows that must not happen.
#[derive(Debug, Clone)]
pub struct Anomaly {
    /// What was broken, e.g. `two commits under one fence`.
    pub what: &'static str,
    /// The instance, role or message it concerns.
    pub subject: String,
    pub events: Vec<Event>,
}

/// Kinds of anomaly, as [`Anomaly::what`] names them.
pub const TWO_COMMITS_UNDER_ONE_FENCE: &str = "two commits under one fence";
pub const AUDIT_RANGES_OVERLAP: &str = "audit-sequence ranges overlap";
pub const AUDIT_GAP: &str = "audit-sequence gap";
pub const FENCE_NOT_GROWING: &str = "fence not growing along the chain";
pub const ANSWERED_BEFORE_COMMIT: &str = "answered before its commit";
pub const ANSWERED_WITHOUT_COMMIT: &str = "answered with no commit recorded";
pub const OVERLAPPING_TERMS: &str = "two replicas lead one role in overlapping terms";
pub const EPOCH_REUSED: &str = "one epoch held by two replicas";
pub const EPOCH_NOT_GROWING: &str = "epochs not growing from holder to holder";
pub const CONSUMED_TWICE: &str = "a message started two instances";
pub const NOT_CONSUMED: &str = "an accepted message with no start recorded";
pub const PARK_ANSWERED_TWICE: &str = "one park answered by two commits";
pub const COMPLETION_NOT_CONSUMED: &str = "a completion answered as done that no commit consumed";
pub const COMPLETED_UNDER_TWO_LOCKS: &str = "a task answered as completed under two locks";
pub const LOCKED_TWICE: &str = "two locks on one task held at once";
pub const LOCKED_AFTER_COMPLETION: &str = "a task locked after its completion was answered";
pub const ANSWERED_AND_UNHEARD: &str = "a lock answered to a worker and handed back as unheard";
pub const ASKED_NOT_RESOLVED: &str = "an asked task or timer neither taken nor resolved";
pub const OUTBOX_NOT_SENT: &str = "an outbox row never sent";
pub const OUTBOX_UNKNOWN: &str = "an outbox key sent that no commit wrote";
pub const ENDED_TWICE: &str = "an instance ended by two commits";
pub const CHILD_NEVER_RAN: &str = "a called child with no commit of its own";
pub const REPORTED_TWICE: &str = "a child's end reported to its parent twice";
pub const UNCALLED_CHILD: &str = "a child's end reported for a call its parent did not make";
pub const COMPENSATED_TWICE: &str = "a completion compensated twice";

/// What the checker found.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub events: usize,
    pub commits: usize,
    pub answers: usize,
    pub terms: usize,
    /// Task locks answered to workers.
    pub locks: usize,
    /// Outbox rows the commits wrote.
    pub outbox: usize,
    /// Children the commits called.
    pub calls: usize,
    /// Compensation handlers completed.
    pub compensations: usize,
    /// Instances a schedule's tick started.
    pub ticks: usize,
    pub anomalies: Vec<Anomaly>,
    /// Gaps and missing starts explained by a killed replica's lost last lines.
    pub unrecorded: Vec<Anomaly>,
}

impl Report {
    /// The anomalies of kind `what`.
    pub fn found(&self, what: &str) -> Vec<&Anomaly> {
        self.anomalies.iter().filter(|a| a.what == what).collect()
    }

    /// Fails the test, listing every anomaly with the seed, if there is any.
    pub fn assert_clean(&self) {
        assert!(self.anomalies.is_empty(), "{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "history check (seed {}): {} events, {} commits, {} answers, {} lease terms, {} task \
             locks, {} outbox rows, {} calls, {} compensations, {} ticks; {} anomalies, {} \
             unrecorded",
            self.seed,
            self.events,
            self.commits,
            self.answers,
            self.terms,
            self.locks,
            self.outbox,
            self.calls,
            self.compensations,
            self.ticks,
            self.anomalies.len(),
            self.unrecorded.len()
        )?;
        for anomaly in self.anomalies.iter().chain(&self.unrecorded) {
            writeln!(
                f,
                "  {}: {} (seed {})",
                anomaly.what, anomaly.subject, self.seed
            )?;
            for event in &anomaly.events {
                writeln!(f, "    {event}")?;
            }
        }
        Ok(())
    }
}

/// The history events in `stderr`: every line of target `sutra::history`, its JSON object.
pub fn events_of(stderr: &str) -> Vec<Event> {
    stderr
        .lines()
        .filter_map(|line| {
            let at = line.find("sutra::history")?;
            let rest = &line[at..];
            let json = &rest[rest.find('{')?..];
            serde_json::from_str(json.trim_end()).ok().map(Event)
        })
        .collect()
}

/// Checks the history of a settled run: every incarnation's log, the messages clients had
/// accepted, the outbox keys the receiver heard, which incarnations were killed, and when the
/// database crashed (wall-clock microseconds, each taken once it was down). `seed` is carried
/// into the report.
pub fn check(
    incarnations: &[Incarnation],
    accepted: &[Accepted],
    heard: &[String],
    killed: &[String],
    crashes: &[i64],
    seed: u64,
) -> Report {
    let events: Vec<Event> = incarnations
        .iter()
        .flat_map(|incarnation| {
            events_of(&incarnation.stderr)
                .into_iter()
                .filter(|event| event.replica() == incarnation.replica)
        })
        .collect();
    let mut report = Report {
        seed,
        events: events.len(),
        commits: 0,
        answers: 0,
        terms: 0,
        locks: 0,
        outbox: 0,
        calls: 0,
        compensations: 0,
        ticks: 0,
        anomalies: Vec::new(),
        unrecorded: Vec::new(),
    };
    let killed = !killed.is_empty();
    let commits = landed(&events, accepted);
    report.commits = commits.len();
    chains(&commits, killed, &mut report);
    answers(&events, &commits, &mut report);
    leases(&events, &mut report);
    consumed(&commits, accepted, killed, &mut report);
    parks(&events, &commits, killed, &mut report);
    locks(&events, crashes, &mut report);
    asked(&commits, killed, &mut report);
    outbox(&events, &commits, heard, killed, &mut report);
    ends(&commits, &mut report);
    calls(&commits, killed, &mut report);
    compensations(&commits, &mut report);
    report
}

/// The commits that landed: each recorded `commit`, and each `commit_unknown` (a group whose
/// `COMMIT` failed, or landed with its answer lost) that what followed shows landed — a later
/// claim of its instance read its fence, or, for a start, a caller was told of its instance —
/// unless another commit of its instance landed under its fence (then it had not: its step was
/// run again alone and committed in its place).
fn landed<'a>(events: &'a [Event], accepted: &[Accepted]) -> Vec<&'a Event> {
    let mut commits: Vec<&Event> = events.iter().filter(|e| e.kind() == "commit").collect();
    let fences: HashSet<(&str, Option<i64>)> = (commits.iter())
        .map(|c| (c.str("instance").unwrap_or_default(), c.int("fence")))
        .collect();
    let read: HashSet<(&str, Option<i64>)> = (commits.iter())
        .map(|c| (c.str("instance").unwrap_or_default(), c.int("claimed")))
        .collect();
    let told: HashSet<&str> = (events.iter())
        .filter(|e| e.kind() == "answered")
        .filter_map(|e| e.str("instance"))
        .chain(accepted.iter().map(|sent| sent.instance.as_str()))
        .collect();
    let shown = |unknown: &&Event| {
        let at = (
            unknown.str("instance").unwrap_or_default(),
            unknown.int("fence"),
        );
        let start = unknown.str("kind") == Some("start");
        !fences.contains(&at) && (read.contains(&at) || (start && told.contains(at.0)))
    };
    let unknown = events.iter().filter(|e| e.kind() == "commit_unknown");
    commits.extend(unknown.filter(shown));
    commits
}

fn anomaly(what: &'static str, subject: impl Into<String>, events: &[&Event]) -> Anomaly {
    Anomaly {
        what,
        subject: subject.into(),
        events: events.iter().map(|e| (*e).clone()).collect(),
    }
}

impl Report {
    /// An anomaly, or, when a killed replica may have died before recording what would clear
    /// it, an unrecorded one.
    fn missing(&mut self, killed: bool, found: Anomaly) {
        if killed {
            self.unrecorded.push(found);
        } else {
            self.anomalies.push(found);
        }
    }
}

/// (a) Per instance, the commits form one chain.
fn chains(commits: &[&Event], killed: bool, report: &mut Report) {
    let mut by_instance: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for commit in commits {
        by_instance
            .entry(commit.str("instance").unwrap_or_default())
            .or_default()
            .push(commit);
    }
    for (instance, mut chain) in by_instance {
        chain.sort_by_key(|c| (c.int("fence"), c.int("seq_first")));
        for pair in chain.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            if before.int("fence") == after.int("fence") {
                report.anomalies.push(anomaly(
                    TWO_COMMITS_UNDER_ONE_FENCE,
                    format!("instance {instance}, fence {:?}", after.int("fence")),
                    &[before, after],
                ));
            } else if after
                .int("claimed")
                .is_some_and(|claimed| Some(claimed) < before.int("fence"))
            {
                // The later commit's claim read a fence older than the commit before it left.
                report.anomalies.push(anomaly(
                    FENCE_NOT_GROWING,
                    format!("instance {instance}"),
                    &[before, after],
                ));
            }
        }
        let mut next = 1;
        let mut last: Option<&Event> = None;
        for commit in chain {
            let (Some(first), Some(end)) = (commit.int("seq_first"), commit.int("seq_last")) else {
                continue;
            };
            let previous: Vec<&Event> = last.into_iter().chain([commit]).collect();
            if first < next {
                report.anomalies.push(anomaly(
                    AUDIT_RANGES_OVERLAP,
                    format!("instance {instance}: {first}..={end} after ..{}", next - 1),
                    &previous,
                ));
            } else if first > next {
                let gap = anomaly(
                    AUDIT_GAP,
                    format!("instance {instance}: {next}..{first} not recorded"),
                    &previous,
                );
                report.missing(killed, gap);
            }
            next = next.max(end + 1);
            last = Some(commit);
        }
    }
}

/// (b) Every caller answered as accepted was answered after the commit it reports.
fn answers(events: &[Event], commits: &[&Event], report: &mut Report) {
    let mut consumed_by: HashMap<(&str, &str), Vec<&Event>> = HashMap::new();
    let mut instances: HashSet<&str> = HashSet::new();
    for commit in commits {
        instances.insert(commit.str("instance").unwrap_or_default());
        if let Some(event_id) = commit.str("event_id") {
            consumed_by
                .entry((commit.replica(), event_id))
                .or_default()
                .push(commit);
        }
    }
    for answer in events.iter().filter(|e| e.kind() == "answered") {
        report.answers += 1;
        let (Some(instance), Some(event_id)) = (answer.str("instance"), answer.str("event_id"))
        else {
            continue; // buffered: no step consumed it yet
        };
        if answer.0["dedup"] == true || answer.str("outcome") != Some("accepted") {
            continue;
        }
        let own = consumed_by
            .get(&(answer.replica(), event_id))
            .into_iter()
            .flatten()
            .find(|commit| commit.str("instance") == Some(instance));
        match own {
            Some(commit) if commit.seq() < answer.seq() => {}
            Some(commit) => report.anomalies.push(anomaly(
                ANSWERED_BEFORE_COMMIT,
                format!("message {event_id}, instance {instance}"),
                &[answer, commit],
            )),
            None if !instances.contains(instance) => report.anomalies.push(anomaly(
                ANSWERED_WITHOUT_COMMIT,
                format!("message {event_id}, instance {instance}"),
                &[answer],
            )),
            None => report.anomalies.push(anomaly(
                ANSWERED_WITHOUT_COMMIT,
                format!(
                    "message {event_id}, instance {instance}: no commit of it by {}",
                    answer.replica()
                ),
                &[answer],
            )),
        }
    }
}

/// One stretch of a replica leading a role, in wall-clock microseconds.
struct Term<'a> {
    replica: &'a str,
    epoch: i64,
    start: i64,
    end: i64,
    events: Vec<&'a Event>,
}

/// (c) No two replicas lead one role at once, and epochs grow.
fn leases(events: &[Event], report: &mut Report) {
    let mut by_holder: BTreeMap<(&str, &str), Vec<&Event>> = BTreeMap::new();
    for event in events
        .iter()
        .filter(|e| matches!(e.kind(), "lease" | "lease_ended"))
    {
        let role = event.str("role").unwrap_or_default();
        by_holder
            .entry((role, event.replica()))
            .or_default()
            .push(event);
    }
    let mut by_role: BTreeMap<&str, Vec<Term>> = BTreeMap::new();
    for ((role, replica), mut lines) in by_holder {
        lines.sort_by_key(|e| e.seq());
        let terms = by_role.entry(role).or_default();
        let mut open: Option<Term> = None;
        for event in lines {
            let epoch = event.int("epoch").unwrap_or_default();
            let at = event.int("at").unwrap_or_default();
            match (event.kind(), event.str("phase")) {
                ("lease", phase) => match &mut open {
                    Some(term) if phase != Some("acquired") && term.epoch == epoch => {
                        term.end = term.end.max(event.int("deadline").unwrap_or(at));
                        if term.events.len() < 2 {
                            term.events.push(event);
                        } else {
                            term.events[1] = event;
                        }
                    }
                    // An acquire, or a renewal of a term whose beginning was not recorded: a
                    // term of its own.
                    _ => {
                        terms.extend(open.take());
                        open = Some(Term {
                            replica,
                            epoch,
                            start: at,
                            end: event.int("deadline").unwrap_or(at),
                            events: vec![event],
                        });
                    }
                },
                _ => {
                    if let Some(mut term) = open.take() {
                        term.end = term.end.min(at);
                        term.events.push(event);
                        terms.push(term);
                    }
                }
            }
        }
        terms.extend(open);
    }
    for (role, mut terms) in by_role {
        report.terms += terms.len();
        // A term answered only once its deadline had passed (its replica frozen between the
        // database's grant and the answer) spans nothing, as such a lock does: by its own clock
        // the replica never held the role, and it acts only within its deadline.
        terms.retain(|term| term.end > term.start);
        terms.sort_by_key(|t| t.start);
        let mut epochs: HashMap<i64, &Term> = HashMap::new();
        for (i, term) in terms.iter().enumerate() {
            for other in &terms[i + 1..] {
                if other.replica != term.replica && other.start < term.end {
                    let events: Vec<&Event> =
                        term.events.iter().chain(&other.events).copied().collect();
                    report.anomalies.push(anomaly(
                        OVERLAPPING_TERMS,
                        format!(
                            "role {role}: {} (epoch {}) until {} and {} (epoch {}) from {}",
                            term.replica,
                            term.epoch,
                            term.end,
                            other.replica,
                            other.epoch,
                            other.start
                        ),
                        &events,
                    ));
                }
            }
            match epochs.get(&term.epoch) {
                Some(holder) if holder.replica != term.replica => {
                    let events: Vec<&Event> =
                        holder.events.iter().chain(&term.events).copied().collect();
                    report.anomalies.push(anomaly(
                        EPOCH_REUSED,
                        format!(
                            "role {role}, epoch {}: {} and {}",
                            term.epoch, holder.replica, term.replica
                        ),
                        &events,
                    ));
                }
                _ => {
                    epochs.insert(term.epoch, term);
                }
            }
        }
        let mut previous: Option<&Term> = None;
        for term in &terms {
            if let Some(before) = previous.filter(|before| before.replica != term.replica)
                && term.epoch <= before.epoch
            {
                let events: Vec<&Event> =
                    before.events.iter().chain(&term.events).copied().collect();
                report.anomalies.push(anomaly(
                    EPOCH_NOT_GROWING,
                    format!(
                        "role {role}: {} (epoch {}) after {} (epoch {})",
                        term.replica, term.epoch, before.replica, before.epoch
                    ),
                    &events,
                ));
            }
            previous = Some(term);
        }
    }
}

/// (d) Every message a client had accepted started exactly one instance.
fn consumed(commits: &[&Event], accepted: &[Accepted], killed: bool, report: &mut Report) {
    let mut starts: HashMap<&str, Vec<&Event>> = HashMap::new();
    for commit in commits.iter().filter(|c| c.str("kind") == Some("start")) {
        if let Some(event_id) = commit.str("event_id") {
            starts.entry(event_id).or_default().push(commit);
        }
    }
    report.ticks = (starts.values().flatten())
        .filter(|start| {
            start
                .str("channel")
                .is_some_and(|c| c.starts_with("schedule:"))
        })
        .count();
    // A message no client was answered for — a schedule's tick — may have started one instance
    // at most, as any other.
    let sent: HashSet<&str> = accepted.iter().map(|a| a.event_id.as_str()).collect();
    for (event_id, found) in &starts {
        if !sent.contains(event_id) && found.len() > 1 {
            let subject = format!("message {event_id} (sent by the engine)");
            report
                .anomalies
                .push(anomaly(CONSUMED_TWICE, subject, found));
        }
    }
    for sent in accepted {
        let found = starts
            .get(sent.event_id.as_str())
            .cloned()
            .unwrap_or_default();
        match found.as_slice() {
            [one] if one.str("instance") == Some(sent.instance.as_str()) => {}
            [] => {
                let missing = anomaly(
                    NOT_CONSUMED,
                    format!(
                        "message {} (instance {}, dedup {})",
                        sent.event_id, sent.instance, sent.dedup
                    ),
                    &[],
                );
                // Only a duplicate's first consumer can have died before recording its commit:
                // a consumed answer is recorded after the commit it reports.
                if killed && sent.dedup {
                    report.unrecorded.push(missing);
                } else {
                    report.anomalies.push(missing);
                }
            }
            several => report.anomalies.push(anomaly(
                CONSUMED_TWICE,
                format!("message {} (answered {})", sent.event_id, sent.instance),
                several,
            )),
        }
    }
}

/// A task's id, `{instance}:{park}`, as its instance and park.
fn task_park(task: &str) -> Option<(&str, i64)> {
    let (instance, park) = task.rsplit_once(':')?;
    Some((instance, park.parse().ok()?))
}

/// The parks each instance's commits answered, with the commits.
fn answered_parks<'a>(commits: &[&'a Event]) -> HashMap<(&'a str, i64), Vec<&'a Event>> {
    let mut answered: HashMap<(&str, i64), Vec<&Event>> = HashMap::new();
    for commit in commits {
        if let (Some(instance), Some(park)) = (commit.str("instance"), commit.int("park")) {
            answered.entry((instance, park)).or_default().push(commit);
        }
    }
    answered
}

/// (e) No park answered twice; every completion answered as done consumed, under one lock.
fn parks(events: &[Event], commits: &[&Event], killed: bool, report: &mut Report) {
    let answered = answered_parks(commits);
    for ((instance, park), by) in &answered {
        if by.len() > 1 {
            let subject = format!("instance {instance}, park {park}");
            report
                .anomalies
                .push(anomaly(PARK_ANSWERED_TWICE, subject, by));
        }
    }
    let mut completed: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for event in events.iter().filter(|e| e.kind() == "task_completed") {
        completed
            .entry(event.str("task").unwrap_or_default())
            .or_default()
            .push(event);
    }
    for (task, answers) in completed {
        let locks: HashSet<&str> = answers.iter().filter_map(|a| a.str("lock")).collect();
        if locks.len() > 1 {
            let subject = format!("task {task}");
            report
                .anomalies
                .push(anomaly(COMPLETED_UNDER_TWO_LOCKS, subject, &answers));
        }
        let consumed = task_park(task).is_some_and(|key| answered.contains_key(&key));
        if !consumed {
            let subject = format!("task {task}");
            report.missing(killed, anomaly(COMPLETION_NOT_CONSUMED, subject, &answers));
        }
    }
}

/// One lock on a task: answered at `from` (wall clock, microseconds), held until `until` (as
/// the database set it, and extended), unless it ended early. A lock answered after it expired —
/// its replica stalled between the grant and the answer — spans nothing: `from` past `until`.
/// One whose answer was not recorded spans nothing either.
struct Lock<'a> {
    print: &'a str,
    from: i64,
    until: i64,
    /// A failure or release ended it, at a moment the records cannot place.
    ended_early: bool,
    /// When its completion was answered.
    completed_at: Option<i64>,
    /// Handed back as locked for a poll that went away: no worker was answered it.
    unheard: bool,
    events: Vec<&'a Event>,
}

/// How long before a database crash a poll's lock may have committed without reaching the disk:
/// a poll commits asynchronously (decision 0035), and PostgreSQL flushes such a commit within
/// three `wal_writer_delay`s (600 ms by default).
const UNFLUSHED: i64 = 1_000_000;

/// The database crash that may have lost a poll's lock answered at `at`, unflushed.
fn crash_losing(locked: &Event, at: i64, crashes: &[i64]) -> Option<i64> {
    if locked.str("via") != Some("poll") {
        return None;
    }
    crashes
        .iter()
        .copied()
        .find(|crash| (at..at + UNFLUSHED).contains(crash))
}

/// (f) A task's locks, one at a time, none after its completion, none both answered to a worker
/// and handed back as unheard. A poll's lock answered within [`UNFLUSHED`] before a database
/// crash may have been lost with it: it is held until the crash at the latest.
fn locks(events: &[Event], crashes: &[i64], report: &mut Report) {
    let mut by_task: BTreeMap<&str, BTreeMap<&str, Lock>> = BTreeMap::new();
    for event in events.iter().filter(|e| e.kind().starts_with("task_")) {
        let (Some(task), Some(print)) = (event.str("task"), event.str("lock")) else {
            continue;
        };
        let at = event.int("at").unwrap_or_default();
        let lock = by_task
            .entry(task)
            .or_default()
            .entry(print)
            .or_insert(Lock {
                print,
                from: i64::MAX,
                until: i64::MIN,
                ended_early: false,
                completed_at: None,
                unheard: false,
                events: Vec::new(),
            });
        match event.kind() {
            "task_locked" => {
                report.locks += 1;
                lock.from = lock.from.min(at);
                let until = event.int("until").unwrap_or(i64::MIN);
                let until = crash_losing(event, at, crashes).map_or(until, |c| until.min(c));
                lock.until = lock.until.max(until);
            }
            "task_extended" => lock.until = lock.until.max(event.int("until").unwrap_or(i64::MIN)),
            "task_completed" => lock.completed_at = Some(at),
            "task_unheard" => lock.unheard = true,
            _ => lock.ended_early = true,
        }
        lock.events.push(event);
    }
    for (task, locks) in by_task {
        let locks: Vec<Lock> = locks.into_values().collect();
        for lock in locks
            .iter()
            .filter(|lock| lock.unheard && lock.from != i64::MAX)
        {
            let subject = format!("task {task}: lock {}", lock.print);
            report
                .anomalies
                .push(anomaly(ANSWERED_AND_UNHEARD, subject, &lock.events));
        }
        for (i, lock) in locks.iter().enumerate() {
            for other in &locks[i + 1..] {
                let both = || -> Vec<&Event> {
                    lock.events.iter().chain(&other.events).copied().collect()
                };
                let overlap = lock.from.max(other.from) < lock.until.min(other.until);
                if overlap && !lock.ended_early && !other.ended_early {
                    let subject = format!("task {task}: locks {} and {}", lock.print, other.print);
                    report
                        .anomalies
                        .push(anomaly(LOCKED_TWICE, subject, &both()));
                }
                // A lock running past a completion's answer was granted after the completion
                // committed: before it, the completing lock held the task.
                for (done, later) in [(lock, other), (other, lock)] {
                    if done.completed_at.is_some_and(|at| later.until > at) {
                        let subject = format!(
                            "task {task}: lock {} after {} completed it",
                            later.print, done.print
                        );
                        report
                            .anomalies
                            .push(anomaly(LOCKED_AFTER_COMPLETION, subject, &both()));
                    }
                }
            }
        }
    }
}

/// Whether an instance of this status takes nothing more: its asked rows are resolved.
fn at_rest(status: Option<&str>) -> bool {
    matches!(status, Some("completed" | "cancelled" | "failed"))
}

/// (g) Every task or timer armed was answered, disarmed, or resolved by its instance's end.
fn asked(commits: &[&Event], killed: bool, report: &mut Report) {
    let mut resolved: HashSet<(&str, i64)> = HashSet::new();
    let mut ended: HashSet<&str> = HashSet::new();
    for commit in commits {
        let instance = commit.str("instance").unwrap_or_default();
        let parks = commit
            .int("park")
            .into_iter()
            .chain(ints(commit, "disarmed"));
        resolved.extend(parks.map(|park| (instance, park)));
        if at_rest(commit.str("status")) {
            ended.insert(instance);
        }
    }
    for commit in commits {
        let instance = commit.str("instance").unwrap_or_default();
        let calls = called(commit).map(|(_, park)| park);
        for park in ints(commit, "asked").chain(calls) {
            if !resolved.contains(&(instance, park)) && !ended.contains(instance) {
                let subject = format!("instance {instance}, park {park}");
                report.missing(killed, anomaly(ASKED_NOT_RESOLVED, subject, &[commit]));
            }
        }
    }
}

/// The numbers in an event's array field.
fn ints<'a>(event: &'a Event, field: &str) -> impl Iterator<Item = i64> + 'a {
    let items = event.0[field]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    items.iter().filter_map(Value::as_i64)
}

/// (h) Every outbox row written was sent, and nothing was sent that no commit wrote.
fn outbox(
    events: &[Event],
    commits: &[&Event],
    heard: &[String],
    killed: bool,
    report: &mut Report,
) {
    let mut written: HashMap<&str, &Event> = HashMap::new();
    for commit in commits {
        let keys = commit.0["outbox"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for key in keys.iter().filter_map(Value::as_str) {
            written.insert(key, commit);
        }
    }
    report.outbox = written.len();
    let mut sent: HashMap<&str, Vec<&Event>> = HashMap::new();
    for event in events.iter().filter(|e| e.kind() == "sent") {
        sent.entry(event.str("key").unwrap_or_default())
            .or_default()
            .push(event);
    }
    let heard: HashSet<&str> = heard.iter().map(String::as_str).collect();
    for (key, commit) in &written {
        if !sent.contains_key(key) && !heard.contains(key) {
            report.missing(killed, anomaly(OUTBOX_NOT_SENT, *key, &[commit]));
        }
    }
    let keys: HashSet<&str> = sent.keys().copied().chain(heard.iter().copied()).collect();
    for key in keys {
        if !written.contains_key(key) {
            let by = sent.get(key).cloned().unwrap_or_default();
            report.missing(killed, anomaly(OUTBOX_UNKNOWN, key, &by));
        }
    }
}

/// The children a commit called, each with the park of its instance waiting for it.
fn called<'a>(commit: &'a Event) -> impl Iterator<Item = (&'a str, i64)> + 'a {
    let items = commit.0["called"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    (items.iter()).filter_map(|call| Some((call["child"].as_str()?, call["park"].as_i64()?)))
}

/// (i) No instance ended by two commits.
fn ends(commits: &[&Event], report: &mut Report) {
    let mut ends: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for commit in commits.iter().filter(|c| at_rest(c.str("status"))) {
        (ends.entry(commit.str("instance").unwrap_or_default()))
            .or_default()
            .push(commit);
    }
    for (instance, by) in ends.into_iter().filter(|(_, by)| by.len() > 1) {
        let subject = format!("instance {instance}");
        report.anomalies.push(anomaly(ENDED_TWICE, subject, &by));
    }
}

/// (j) Every child called ran, and its end was reported once, to the call that made it. That
/// its parent's park then heard of it once is (e) and (g): the park is asked, and answered once.
fn calls(commits: &[&Event], killed: bool, report: &mut Report) {
    let mut made: HashMap<&str, (&str, i64, &Event)> = HashMap::new();
    for commit in commits {
        for (child, park) in called(commit) {
            made.insert(
                child,
                (commit.str("instance").unwrap_or_default(), park, commit),
            );
        }
    }
    report.calls = made.len();
    let ran: HashSet<&str> = commits.iter().filter_map(|c| c.str("instance")).collect();
    for (child, (_, _, by)) in &made {
        if !ran.contains(child) {
            let subject = format!("child {child}");
            report.missing(killed, anomaly(CHILD_NEVER_RAN, subject, &[by]));
        }
    }
    let mut reports: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for commit in commits.iter().filter(|c| c.0["reported"].is_object()) {
        (reports.entry(commit.str("instance").unwrap_or_default()))
            .or_default()
            .push(commit);
    }
    for (child, by) in reports {
        let subject = format!("child {child}");
        if by.len() > 1 {
            report
                .anomalies
                .push(anomaly(REPORTED_TWICE, subject.clone(), &by));
        }
        let to = &by[0].0["reported"];
        let asked = (to["parent"].as_str(), to["park"].as_i64());
        let call = made
            .get(child)
            .map(|(parent, park, _)| (Some(*parent), Some(*park)));
        if call != Some(asked) {
            report.missing(killed, anomaly(UNCALLED_CHILD, subject, &by));
        }
    }
}

/// (k) No entry of an instance's compensation log compensated by two commits.
fn compensations(commits: &[&Event], report: &mut Report) {
    let mut done: BTreeMap<(&str, i64), Vec<&Event>> = BTreeMap::new();
    for commit in commits {
        let instance = commit.str("instance").unwrap_or_default();
        for entry in ints(commit, "compensated") {
            done.entry((instance, entry)).or_default().push(commit);
        }
    }
    report.compensations = done.len();
    for ((instance, entry), by) in done.into_iter().filter(|(_, by)| by.len() > 1) {
        let subject = format!("instance {instance}, entry {entry}");
        report
            .anomalies
            .push(anomaly(COMPENSATED_TWICE, subject, &by));
    }
}
