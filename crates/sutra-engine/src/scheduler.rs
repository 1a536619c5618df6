//! The scheduler (issue 34, decision 0056), the loop of lease role `scheduler`: it starts an
//! instance of each scheduled flow at each tick of its schedule.
//!
//! A tick is a start like any message's, run on the new instance's lane, whose inbox entry is
//! the tick's event id (`{deployment}/{flow}@{tick}`) on the flow's reserved channel
//! (`schedule:{flow}`). The inbox makes it exactly-once: a leader that dies after the start
//! committed and before it moved the schedule's row on leaves the tick due, and its successor's
//! start of the same tick is answered as a duplicate with the instance the first one started.
//! Ticks are fired and recorded one at a time, so a row's `next_at` is always the first tick not
//! yet fired, the same for every leader.
//!
//! Each pass, the leader first writes the schedules of every active version it has loaded and
//! not yet written this term (a deploy wakes it), then fires the due rows of versions it has
//! loaded: a row of a version this replica has not loaded yet waits for it, and a draining
//! version has no row. A tick more than the grace late (twice the lease TTL: what a hand-over
//! takes) was missed — no replica led the role — and the schedule's `catch-up` says what to do:
//! `none` skips every missed tick, `one` fires the first of them and skips the rest. A tick
//! whose tenant is at its live-instance quota (decision 0079) is skipped too, and counted
//! (`outcome="over_quota"`).

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::Value;
use sutra_core::expr::Bindings;
use sutra_core::model::{CatchUp, Deployment, Overlap, Schedule};
use sutra_core::snapshot::{InstanceInfo, Status};
use sutra_core::step::Message;
use sutra_store::{Advance, InstanceKey, NewSchedule, ScheduleKey, ScheduleRecord};
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::fault;
use crate::lane::Lanes;
use crate::leadership::RoleLoops;
use crate::metrics::{self, TickOutcome};
use crate::registry::{Current, Live};
use crate::request::{StepRequest, Work};
use crate::shared::Shared;

/// The lease role that fires schedules.
pub(crate) const SCHEDULER: &str = "scheduler";

/// The most due rows one pass reads; the rest are read by the next pass, at once.
const BATCH: u32 = 100;

/// The most ticks a pass walks to pass over a long outage's missed ticks (a schedule every
/// second, down for a day, is 86,400): past it the row moves on at the next pass.
const WALK: usize = 100_000;

/// The role loop of `scheduler`.
pub(crate) fn spawn(
    roles: &RoleLoops,
    shared: &Arc<Shared>,
    lanes: &Arc<Lanes>,
    live: &Arc<Current>,
) {
    let (shared, lanes, live) = (Arc::clone(shared), Arc::clone(lanes), Arc::clone(live));
    roles.spawn(SCHEDULER, move || {
        let scheduler = Scheduler {
            shared: Arc::clone(&shared),
            lanes: Arc::clone(&lanes),
            live: Arc::clone(&live),
            written: HashMap::new(),
        };
        scheduler.run()
    });
}

/// One term of the role.
struct Scheduler {
    shared: Arc<Shared>,
    lanes: Arc<Lanes>,
    live: Arc<Current>,
    /// The active version of each deployment whose schedules this term has written.
    written: HashMap<(String, String), u32>,
}

impl Scheduler {
    /// A pass at once when the term starts, then every `sutra.schedules.poll`, or sooner when a
    /// version is activated here.
    async fn run(mut self) {
        let poll = self.shared.config.schedules_poll.unsigned_abs();
        loop {
            if let Err(error) = self.pass().await {
                warn!(%error, "the scheduler's pass failed; it tries again next poll");
            }
            tokio::select! {
                () = self.shared.clock.sleep(poll) => {}
                () = self.shared.schedules_changed.notified() => {}
            }
        }
    }

    async fn pass(&mut self) -> Result<(), Error> {
        let live = self.live.get();
        self.write_schedules(&live).await?;
        let now = self.shared.clock.now();
        for row in self.shared.store.due_schedules(now, BATCH).await? {
            let Some((deployment, schedule)) = scheduled(&live, &row) else {
                debug!(
                    deployment = row.deployment,
                    flow = row.flow,
                    version = row.version,
                    "a due schedule of a version not loaded here as active waits for it"
                );
                continue;
            };
            if let Err(error) = self.fire_due(&row, &deployment, schedule).await {
                warn!(deployment = row.deployment, flow = row.flow, %error,
                      "a schedule's tick did not fire; it is tried again next pass");
            }
        }
        Ok(())
    }

    /// Writes the schedule rows of every active version not written yet this term.
    async fn write_schedules(&mut self, live: &Live) -> Result<(), Error> {
        let now = self.shared.clock.now();
        for (tenant, name, version, deployment) in live.active() {
            let key = (tenant.to_owned(), name.to_owned());
            if self.written.get(&key) == Some(&version) {
                continue;
            }
            let schedules = new_schedules(deployment, now);
            self.shared
                .store
                .sync_schedules(tenant, name, version, &schedules)
                .await?;
            self.written.insert(key, version);
        }
        Ok(())
    }

    /// Fires or skips the row's due ticks, one at a time, until its next tick is in the future.
    async fn fire_due(
        &self,
        row: &ScheduleRecord,
        deployment: &Deployment,
        schedule: &Schedule,
    ) -> Result<(), Error> {
        let key = ScheduleKey {
            tenant: row.tenant.clone(),
            deployment: row.deployment.clone(),
            flow: row.flow.clone(),
        };
        let mut from = row.next_at;
        let mut last = row.last_instance.clone();
        let grace = self.shared.config.lease_ttl * 2;
        loop {
            let now = self.shared.clock.now();
            if from > now {
                return Ok(());
            }
            let horizon = now.checked_sub(grace).unwrap_or(Timestamp::MIN);
            // Ticks more than the grace late were missed: the first of them is `from`.
            let (next_at, mut missed) = if from < horizon {
                first_tick_since(schedule, from, horizon)
            } else {
                (next_tick(schedule, from), 0)
            };
            let fire = missed == 0 || schedule.catch_up == CatchUp::One;
            let fired = if !fire {
                None
            } else if self
                .overlaps(schedule, &row.tenant, last.as_deref())
                .await?
            {
                metrics::schedule_tick(TickOutcome::Overlapped);
                missed = missed.saturating_sub(1);
                None
            } else if !self.shared.live.admit(&row.tenant) {
                // A schedule starts instances as a sender does, and is held to the same quota:
                // ticks whose instances never end would otherwise grow the tenant past it. The
                // tick is skipped, as an overlapped one is, and counted.
                warn!(tenant = row.tenant, flow = row.flow, %from, "a tick was skipped: its tenant is at its live-instance quota (sutra.tenants.max-live-instances)");
                metrics::schedule_tick(TickOutcome::OverQuota);
                missed = missed.saturating_sub(1);
                None
            } else {
                let instance = self.start(row, deployment, schedule, from).await?;
                fault::point("tick-started");
                metrics::schedule_tick(TickOutcome::Fired);
                missed = missed.saturating_sub(1);
                last = Some(instance.clone());
                Some((from, instance))
            };
            for _ in 0..missed {
                metrics::schedule_tick(TickOutcome::Missed);
            }
            let advance = Advance {
                from,
                next_at,
                fired,
            };
            if !self
                .shared
                .store
                .advance_schedule(&key, row.version, &advance)
                .await?
            {
                // Another leader moved the row, or a deploy replaced it: the next pass reads it.
                return Ok(());
            }
            from = next_at;
        }
    }

    /// Whether the tick is skipped because the instance the schedule started last still runs.
    async fn overlaps(
        &self,
        schedule: &Schedule,
        tenant: &str,
        last: Option<&str>,
    ) -> Result<bool, Error> {
        let (Overlap::Skip, Some(last)) = (schedule.overlap, last) else {
            return Ok(false);
        };
        let record = self.shared.store.instance(tenant, last).await?;
        Ok(record.is_some_and(|record| {
            matches!(record.snapshot.status, Status::Created | Status::Suspended)
        }))
    }

    /// Starts the tick's instance on its lane; the instance's id, or the one an earlier start
    /// of the same tick made.
    async fn start(
        &self,
        row: &ScheduleRecord,
        deployment: &Deployment,
        schedule: &Schedule,
        tick: Timestamp,
    ) -> Result<String, Error> {
        let id = uuid::Uuid::now_v7().to_string();
        let input = schedule
            .input
            .render(&Bindings::new().timestamp("tick", tick))
            .unwrap_or_else(|error| {
                warn!(flow = row.flow, %error, "a schedule's input did not render; the instance starts with null");
                Value::Null
            });
        let message = Message {
            id: Schedule::event_id(&row.deployment, &row.flow, tick),
            kind: "sutra.schedule.tick".to_owned(),
            source: format!("sutra/schedules/{}", deployment.name),
            subject: Some(row.flow.clone()),
            time: Some(tick.to_string()),
            data: input,
        };
        let info = InstanceInfo {
            id: id.clone(),
            tenant: row.tenant.clone(),
            deployment: row.deployment.clone(),
            version: row.version,
            flow: row.flow.clone(),
            parent: None,
        };
        let request = StepRequest {
            key: InstanceKey {
                tenant: row.tenant.clone(),
                id: id.clone(),
            },
            work: Work::Start {
                info,
                message,
                channel: Schedule::channel(&row.flow),
                key: None,
            },
            hold: false,
        };
        match self.lanes.run(request).await {
            Ok(_) => {
                info!(deployment = row.deployment, flow = row.flow, %tick, instance = id, "a schedule fired");
                Ok(id)
            }
            Err(Error::Store(sutra_store::Error::Duplicate(first))) => {
                first.instance.ok_or_else(|| {
                    Error::InvalidState("a tick's inbox entry names no instance".into())
                })
            }
            Err(error) => Err(error),
        }
    }
}

/// The rows `sync_schedules` writes for `deployment`: each scheduled flow's, due at its first
/// tick after `now`.
pub(crate) fn new_schedules(deployment: &Deployment, now: Timestamp) -> Vec<NewSchedule> {
    deployment
        .flows
        .values()
        .filter_map(|flow| {
            let schedule = flow.schedule()?;
            Some(NewSchedule {
                flow: flow.name.clone(),
                expression: schedule.expression(),
                zone: schedule.zone_name.clone(),
                next_at: next_tick(schedule, now),
            })
        })
        .collect()
}

/// The row's version as loaded here, if it is the active one, and its flow's schedule.
fn scheduled<'a>(live: &'a Live, row: &ScheduleRecord) -> Option<(Arc<Deployment>, &'a Schedule)> {
    if live.active_version(&row.tenant, &row.deployment) != Some(row.version) {
        return None;
    }
    let deployment = live.loaded(&row.tenant, &row.deployment, row.version)?;
    let schedule = deployment.flows.get(&row.flow)?.schedule()?;
    Some((Arc::clone(deployment), schedule))
}

/// The tick after `after`; a schedule that never fires again (the checker refuses one that
/// never fires at all) is due at the end of time.
fn next_tick(schedule: &Schedule, after: Timestamp) -> Timestamp {
    schedule
        .when
        .next_after(&schedule.zone, after)
        .unwrap_or(Timestamp::MAX)
}

/// The first tick at or after `since`, walking from the tick `from` (at most [`WALK`] ticks),
/// and how many ticks it passed over, `from` included.
fn first_tick_since(schedule: &Schedule, from: Timestamp, since: Timestamp) -> (Timestamp, usize) {
    let mut tick = from;
    let mut passed = 0;
    while tick < since && passed < WALK {
        tick = next_tick(schedule, tick);
        passed += 1;
    }
    (tick, passed)
}
