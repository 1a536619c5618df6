//! Conformance of group commit (decision 0024): the claim taken inside the group's transaction
//! as its row lock, a refused or unwritten member leaving nothing, nothing durable before the
//! commit, each member acting for its own tenant.

use super::fixtures::*;
use crate::TakenBy;

/// A step of `claimed` with one more history event: what a member writes.
fn advanced(claimed: &Claimed) -> StepCommit {
    let mut snapshot = claimed.snapshot.clone();
    snapshot.audit_seq += 1;
    StepCommit {
        history: vec![event(snapshot.audit_seq, HistoryKind::MessageReceived)],
        snapshot,
        ..step(claimed)
    }
}

pub async fn a_refused_member_writes_nothing_and_the_others_commit<S: Store>(store: &S) {
    let (free, held) = (id(1), id(2));
    started(store, TENANT, &free).await;
    started(store, TENANT, &held).await;
    claimed(store, &held, LANE_B).await;
    let before = store.instance(TENANT, &held).await.unwrap();

    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let first = group
        .claim(TENANT, &free, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    group.commit_step(&advanced(&first)).await.unwrap();
    group.member(TENANT).await.unwrap();
    let refused = group.claim(TENANT, &held, &owner(LANE_A), HOUR).await;
    assert_eq!(refused, Err(Error::ClaimHeld));
    group.commit().await.unwrap();

    let landed = record(store, &free).await;
    assert_eq!(
        (&landed.snapshot, &landed.owner),
        (&advanced(&first).snapshot, &None)
    );
    assert_eq!(store.instance(TENANT, &held).await.unwrap(), before);
    assert_eq!(owner_of(store, &held).await.as_deref(), Some(LANE_B));
}

/// A member whose wait is on a key another park holds is refused before it writes — a step
/// that cancels a task first included — and the others commit (decision 0068).
pub async fn a_member_refused_for_a_taken_key_writes_nothing_and_the_others_commit<S: Store>(
    store: &S,
) {
    let (holder, free, rival, cancelling) = (id(1), id(2), id(3), id(4));
    for instance in [&holder, &free, &rival, &cancelling] {
        started(store, TENANT, instance).await;
    }
    let claim = claimed(store, &holder, LANE_A).await;
    store
        .commit(&arming(&claim, vec![wait(ParkId(1), "t-1")]))
        .await
        .unwrap();
    let claim = claimed(store, &cancelling, LANE_A).await;
    store
        .commit(&arming(&claim, vec![task(ParkId(2))]))
        .await
        .unwrap();
    let untouched = (
        record(store, &rival).await,
        record(store, &cancelling).await,
        store.tasks(TENANT, &cancelling).await.unwrap(),
    );
    let taken = Error::AliasTaken {
        channel: REPLIES.to_owned(),
        key: "t-1".to_owned(),
    };

    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let claim = group
        .claim(TENANT, &rival, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    let arms = arming(&claim, vec![wait(ParkId(7), "t-1")]);
    assert_eq!(group.commit_step(&arms).await.unwrap_err(), taken);
    group.member(TENANT).await.unwrap();
    let claim = group
        .claim(TENANT, &cancelling, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    let mut cancels = arming(&claim, vec![wait(ParkId(7), "t-1")]);
    cancels.disarms.push(disarm(ParkId(2), ParkSort::Task));
    assert_eq!(group.commit_step(&cancels).await.unwrap_err(), taken);
    group.member(TENANT).await.unwrap();
    let claim = group
        .claim(TENANT, &free, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    group.commit_step(&advanced(&claim)).await.unwrap();
    group.commit().await.unwrap();

    assert_eq!(
        record(store, &free).await.snapshot,
        advanced(&claim).snapshot
    );
    let after = (
        record(store, &rival).await,
        record(store, &cancelling).await,
        store.tasks(TENANT, &cancelling).await.unwrap(),
    );
    assert_eq!(after, untouched, "the refused members wrote nothing");
    let holding = WaitTarget {
        instance: holder,
        park: ParkId(1),
    };
    assert_eq!(
        store.find_wait(TENANT, REPLIES, "t-1").await.unwrap(),
        Some(holding)
    );
}

/// A settle consuming a message (a relay's) whose fence no longer holds writes no inbox row
/// either — the row is written by the settle's statement, joined to what it wrote (decision
/// 0073) — and the group's other members commit: its message is still unconsumed.
pub async fn a_consuming_settle_whose_fence_moved_leaves_its_message_unconsumed<S: Store>(
    store: &S,
) {
    let (free, stale) = (id(1), id(2));
    started(store, TENANT, &free).await;
    started(store, TENANT, &stale).await;
    let untouched = record(store, &stale).await;

    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let mut claim = group
        .claim(TENANT, &stale, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    claim.token.fence += 7;
    let relay = StepCommit {
        inbox: Some(InboxEntry {
            channel: REPLIES.to_owned(),
            event_id: "reply-stale".to_owned(),
            answer: answer(&stale, Status::Suspended),
            key: None,
        }),
        ..advanced(&claim)
    };
    assert_eq!(
        group.commit_step(&relay).await.unwrap_err(),
        Error::ClaimLost
    );
    group.member(TENANT).await.unwrap();
    let claim = group
        .claim(TENANT, &free, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    group.commit_step(&advanced(&claim)).await.unwrap();
    group.commit().await.unwrap();

    assert_eq!(
        store
            .inbox_answer(TENANT, REPLIES, "reply-stale")
            .await
            .unwrap(),
        None,
        "the message is not consumed"
    );
    assert_eq!(record(store, &stale).await, untouched);
    assert_eq!(
        record(store, &free).await.snapshot,
        advanced(&claim).snapshot
    );
}

pub async fn a_member_claim_writes_nothing_and_its_commit_grows_the_fence<S: Store>(store: &S) {
    let (written, unwritten) = (id(1), id(2));
    started(store, TENANT, &written).await;
    started(store, TENANT, &unwritten).await;
    let (before, untouched) = (
        record(store, &written).await,
        record(store, &unwritten).await,
    );

    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let first = group
        .claim(TENANT, &written, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    assert_eq!(first.token.kind, ClaimKind::Locked);
    assert_eq!(
        first.token.fence, before.fence,
        "the claim itself writes nothing"
    );
    group.commit_step(&advanced(&first)).await.unwrap();
    // Claimed, then rejected by the executor: the member writes nothing at all.
    group.member(TENANT).await.unwrap();
    group
        .claim(TENANT, &unwritten, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    group.commit().await.unwrap();

    let after = record(store, &written).await;
    assert_eq!(
        (&after.snapshot, &after.owner, after.fence),
        (&advanced(&first).snapshot, &None, before.fence + 1),
        "the step grows the fence by one and leaves the instance unowned"
    );
    assert_eq!(record(store, &unwritten).await, untouched);
}

pub async fn nothing_of_a_group_is_durable_before_its_commit<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let before = record(store, &id).await;

    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let claim = group
        .claim(TENANT, &id, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    group.commit_step(&advanced(&claim)).await.unwrap();
    // The group gives up here: its transaction is never committed.
    group.rollback().await.unwrap();

    assert_eq!(record(store, &id).await, before);
    // And the claim taken inside the group was never anyone's: another owner takes it at once,
    // the rollback having released the row before it returned (a dropped group's would linger
    // until its connection is used again).
    claimed(store, &id, LANE_B).await;
}

pub async fn a_group_claim_of_a_step_in_flight_is_refused<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let mut first = store.group(TENANT).await.unwrap();
    first.member(TENANT).await.unwrap();
    first
        .claim(TENANT, &id, &owner(LANE_A), HOUR)
        .await
        .unwrap();

    // A second group while the first still holds the instance must not get it while the first
    // is in flight. A store whose writers run side by side (one replicas share) must refuse it
    // at once, with the first still open. SQLite's single writer makes the second wait for the
    // first to end (bounded by the busy timeout), and then refuses it as held all the same
    // (decision 0048): the wait was for the instance's claim, and the claim-bounce meter must
    // see it. The instance is free once the first ended: a group begun after takes it.
    let second = async {
        let mut second = store.group(TENANT).await?;
        second.member(TENANT).await?;
        second.claim(TENANT, &id, &owner(LANE_B), HOUR).await
    };
    if store.shared_by_replicas() {
        let refused = tokio::time::timeout(Duration::from_secs(30), second)
            .await
            .expect("a claim held by a group in flight must be refused, not waited for");
        assert_eq!(refused, Err(Error::ClaimHeld));
        first.commit().await.unwrap();
        return;
    }
    let first_ended = std::sync::atomic::AtomicBool::new(false);
    let second = async {
        let claimed = second.await;
        (
            claimed,
            first_ended.load(std::sync::atomic::Ordering::SeqCst),
        )
    };
    let first_ends = async {
        // Gives the second group time to start waiting for the write lock; the assertion holds
        // however long it takes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        first.commit().await.unwrap();
        first_ended.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let ((claimed, after_first), ()) = tokio::join!(second, first_ends);
    assert!(
        claimed == Err(Error::ClaimHeld) && after_first,
        "the single writer answers the second only after the first group ended, and refuses \
         it as held: {claimed:?}"
    );
    let mut third = store.group(TENANT).await.unwrap();
    third.member(TENANT).await.unwrap();
    let taken = third.claim(TENANT, &id, &owner(LANE_B), HOUR).await;
    assert!(taken.is_ok(), "nobody holds the instance now: {taken:?}");
}

pub async fn each_member_acts_for_its_own_tenant<S: Store>(store: &S) {
    let (ours, theirs) = (id(1), id(2));
    started(store, TENANT, &ours).await;
    started(store, OTHER_TENANT, &theirs).await;

    let mut group = store.group(TENANT).await.unwrap();
    group.member(OTHER_TENANT).await.unwrap();
    let foreign = group.claim(OTHER_TENANT, &ours, &owner(LANE_A), HOUR).await;
    assert!(
        matches!(foreign, Err(Error::InstanceNotFound(_))),
        "a member acting for {OTHER_TENANT} must not see {TENANT}'s instance: {foreign:?}"
    );
    let claim = group
        .claim(OTHER_TENANT, &theirs, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    let their_step = advanced(&claim);
    group.commit_step(&their_step).await.unwrap();
    group.member(TENANT).await.unwrap();
    let claim = group
        .claim(TENANT, &ours, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    let our_step = advanced(&claim);
    group.commit_step(&our_step).await.unwrap();
    group.commit().await.unwrap();

    assert_eq!(record(store, &ours).await.snapshot, our_step.snapshot);
    let theirs = store
        .instance(OTHER_TENANT, &theirs)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(theirs.snapshot, their_step.snapshot);
}

/// An instance parked on a receive's wait and on a timer, as a flow waiting for a reply with a
/// deadline is: a plain settle of it clears both parks.
async fn parked<S: Store>(store: &S, instance: &str) {
    started(store, TENANT, instance).await;
    let claim = claimed(store, instance, LANE_A).await;
    let timer = Arm::Timer {
        park: TIMER_PARK,
        due: now() + HOUR,
    };
    let parking = arming(&claim, vec![wait(WAIT_PARK, instance), timer]);
    store.commit(&parking).await.unwrap();
}

/// A plain settle of a [`parked`] instance: a history event, both parks cleared, a task armed
/// (locked for a worker when `for_worker`).
fn clearing(claimed: &Claimed, for_worker: bool) -> StepCommit {
    let mut armed = task(TASK_PARK);
    if let Arm::Task { taken_by, .. } = &mut armed {
        *taken_by = for_worker.then(|| TakenBy {
            worker: "worker-a".to_owned(),
            lock: HOUR,
        });
    }
    StepCommit {
        arms: vec![armed],
        disarms: vec![
            disarm(WAIT_PARK, ParkSort::Receive),
            disarm(TIMER_PARK, ParkSort::Wait),
        ],
        ..advanced(claimed)
    }
}

/// A group that defers, whose first member kept a plain settle of the [`parked`] instance
/// `first` (clearing both its parks), with its second member opened.
async fn after_a_kept_settle<S: Store>(store: &S, first: &str) -> Box<dyn crate::Group> {
    let mut group = store.group(TENANT).await.unwrap();
    group.defer_plain_steps();
    group.member(TENANT).await.unwrap();
    let claim = group
        .claim(TENANT, first, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    group.commit_step(&clearing(&claim, false)).await.unwrap();
    group.member(TENANT).await.unwrap();
    group
}

/// A group that may keep its plain settles for one write (decision 0059) lands each as a
/// settle written on its own would: its snapshot and fence, its history, its parks' wait and
/// timer gone, its task armed — locked with the very token the member was handed when a worker
/// took it.
pub async fn kept_settles_land_as_settles_written_one_by_one<S: Store>(store: &S) {
    let instances = [id(1), id(2), id(3)];
    let mut before = Vec::new();
    for instance in &instances {
        parked(store, instance).await;
        before.push(record(store, instance).await);
    }

    let mut group = store.group(TENANT).await.unwrap();
    group.defer_plain_steps();
    let mut written = Vec::new();
    for (n, instance) in instances.iter().enumerate() {
        group.member(TENANT).await.unwrap();
        let claim = group
            .claim(TENANT, instance, &owner(LANE_A), HOUR)
            .await
            .unwrap();
        let step = clearing(&claim, n == 0);
        let committed = group.commit_step(&step).await.unwrap();
        written.push((step, committed));
    }
    group.commit().await.unwrap();
    assert_eq!(
        store.next_due().await.unwrap(),
        None,
        "every timer is cleared"
    );

    for ((step, committed), before) in written.iter().zip(&before) {
        let instance = &step.snapshot.instance.id;
        let after = record(store, instance).await;
        assert_eq!(
            (&after.snapshot, &after.owner, after.fence),
            (&step.snapshot, &None, before.fence + 1),
            "{instance}: the settle"
        );
        let history = store.history(TENANT, instance).await.unwrap();
        assert!(history.contains(&step.history[0]), "{instance}: history");
        let wait = store.find_wait(TENANT, REPLIES, instance).await.unwrap();
        assert_eq!(wait, None, "{instance}: the receive's wait is cleared");
        let tasks = store.tasks(TENANT, instance).await.unwrap();
        let [task] = tasks.as_slice() else {
            panic!("{instance}: one task, not {tasks:?}");
        };
        let handed: Vec<_> = committed
            .taken
            .iter()
            .map(|t| t.lock_token.clone())
            .collect();
        match handed.as_slice() {
            [token] => {
                assert_eq!(task.state, TaskState::Locked, "{instance}");
                assert!(
                    store
                        .complete_task(TENANT, &task.id, token, &json!({}))
                        .await
                        .is_ok(),
                    "{instance}: the token handed over holds the lock"
                );
            }
            _ => assert_eq!(task.state, TaskState::Available, "{instance}"),
        }
    }
}

/// A kept settle whose fence moved writes nothing of any kind, and neither does any member of
/// its group: the group fails with `ClaimLost` (its members were answered as written, so none
/// may land), and the engine runs each alone. Each row kind is checked on its own: the instance
/// row, history, the receive's wait and the timer a settle clears, the task it arms.
pub async fn a_kept_settle_whose_fence_moved_writes_nothing_of_any_kind<S: Store>(store: &S) {
    let (fresh, stale) = (id(1), id(2));
    parked(store, &fresh).await;
    parked(store, &stale).await;
    let rows_of = |instance: String| async move {
        (
            record(store, &instance).await,
            store.history(TENANT, &instance).await.unwrap(),
            store.find_wait(TENANT, REPLIES, &instance).await.unwrap(),
            store.tasks(TENANT, &instance).await.unwrap(),
        )
    };
    let before = (rows_of(fresh.clone()).await, rows_of(stale.clone()).await);
    let timers_due = store.next_due().await.unwrap();

    let mut group = after_a_kept_settle(store, &fresh).await;
    let mut second = group
        .claim(TENANT, &stale, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    second.token.fence += 7;
    let outcome = match group.commit_step(&clearing(&second, true)).await {
        Ok(_) => group.commit().await,
        Err(error) => Err(error),
    };
    assert_eq!(outcome, Err(Error::ClaimLost));

    let after = (rows_of(fresh.clone()).await, rows_of(stale.clone()).await);
    for (instance, before, after) in [(&fresh, &before.0, &after.0), (&stale, &before.1, &after.1)]
    {
        assert_eq!(before.0, after.0, "{instance}: the instance row");
        assert_eq!(before.1, after.1, "{instance}: history");
        assert_eq!(before.2, after.2, "{instance}: the receive's wait");
        assert_eq!(before.3, after.3, "{instance}: tasks");
    }
    assert_eq!(store.next_due().await.unwrap(), timers_due, "the timers");
}

/// A step after a kept settle reads what the settle wrote (decision 0059): the correlation key
/// a kept settle's cleared receive gave up is free for the next member's wait, as it is when
/// each member writes at once.
pub async fn a_step_after_a_kept_settle_sees_the_key_it_gave_up<S: Store>(store: &S) {
    let (leaving, taking) = (id(1), id(2));
    parked(store, &leaving).await;
    started(store, TENANT, &taking).await;

    let mut group = after_a_kept_settle(store, &leaving).await;
    let second = group
        .claim(TENANT, &taking, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    let same_key = arming(&second, vec![wait(WAIT_PARK, &leaving)]);
    group.commit_step(&same_key).await.unwrap();
    group.commit().await.unwrap();

    let holder = store.find_wait(TENANT, REPLIES, &leaving).await.unwrap();
    assert_eq!(
        holder,
        Some(WaitTarget {
            instance: taking.clone(),
            park: WAIT_PARK,
        })
    );
}

/// A start of a suspended instance on message `event_id`, arming a task.
fn starting(instance: &str, event_id: &str) -> StepCommit {
    StepCommit {
        arms: vec![task(TASK_PARK)],
        ..start(snapshot(TENANT, instance, Status::Suspended), event_id)
    }
}

/// What a start may have written: its instance, history, tasks, and its message's inbox row.
async fn start_rows<S: Store>(store: &S, step: &StepCommit) -> impl PartialEq + std::fmt::Debug {
    let instance = &step.snapshot.instance.id;
    let entry = step.inbox.as_ref().expect("a start has its message");
    (
        store.instance(TENANT, instance).await.unwrap(),
        store.history(TENANT, instance).await.unwrap(),
        store.tasks(TENANT, instance).await.unwrap(),
        (store.inbox_answer(TENANT, &entry.channel, &entry.event_id))
            .await
            .unwrap(),
    )
}

/// Starts kept for the group's end land as starts written one by one: each instance with its
/// snapshot, history and task, and its message's inbox row answering it.
pub async fn kept_starts_land_as_starts_written_one_by_one<S: Store>(store: &S) {
    let steps: Vec<_> = (1..=3)
        .map(|n| starting(&id(n), &format!("start-{n}")))
        .collect();

    let mut group = store.group(TENANT).await.unwrap();
    group.defer_plain_steps();
    for step in &steps {
        group.member(TENANT).await.unwrap();
        group.commit_step(step).await.unwrap();
    }
    group.commit().await.unwrap();

    for step in &steps {
        let instance = &step.snapshot.instance.id;
        assert_eq!(record(store, instance).await.snapshot, step.snapshot);
        let history = store.history(TENANT, instance).await.unwrap();
        assert_eq!(history, step.history, "{instance}: history");
        let tasks = store.tasks(TENANT, instance).await.unwrap();
        assert_eq!(tasks.len(), 1, "{instance}: its task");
        let entry = step.inbox.as_ref().unwrap();
        let answer = store
            .inbox_answer(TENANT, &entry.channel, &entry.event_id)
            .await
            .unwrap();
        assert_eq!(answer.as_ref(), Some(&entry.answer), "{instance}: inbox");
    }
}

/// A kept start whose message was consumed already writes nothing of any kind, and neither does
/// any member of its group: the group fails, and the engine runs each alone, where the start is
/// answered as a duplicate. So does a kept start of a message an instance waits on (a relay).
pub async fn a_kept_start_whose_message_is_taken_writes_nothing_of_any_kind<S: Store>(store: &S) {
    store.commit(&starting(&id(1), "start-1")).await.unwrap();
    parked(store, &id(2)).await;
    let fresh = starting(&id(3), "start-3");
    let duplicate = starting(&id(4), "start-1");
    let mut awaited = starting(&id(5), "reply-5");
    if let Some(entry) = &mut awaited.inbox {
        entry.channel = REPLIES.to_owned();
        entry.key = Some(id(2));
    }
    for unlanding in [&duplicate, &awaited] {
        let kept = [&fresh, unlanding];
        let mut before = Vec::new();
        for step in kept {
            before.push(start_rows(store, step).await);
        }

        let mut group = store.group(TENANT).await.unwrap();
        group.defer_plain_steps();
        let mut outcome = Ok(Default::default());
        for step in kept {
            group.member(TENANT).await.unwrap();
            outcome = outcome.and(group.commit_step(step).await);
        }
        let outcome = match outcome {
            Ok(_) => group.commit().await,
            Err(error) => Err(error),
        };
        assert!(outcome.is_err(), "the group must fail: {outcome:?}");

        for (step, before) in kept.into_iter().zip(before) {
            let instance = &step.snapshot.instance.id;
            let after = start_rows(store, step).await;
            assert_eq!(after, before, "{instance}: instance, history, tasks, inbox");
        }
    }
}
