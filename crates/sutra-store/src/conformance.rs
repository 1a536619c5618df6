//! The store conformance suite: the guarantees of SPEC §5 that every [`Store`] must keep, written
//! once against the trait so that every backend is held to the same contract, and a backend
//! cannot quietly weaken one (the style of River's `riverdrivertest`).
//!
//! Each invariant is a `pub async fn` named after it, taking a fresh, empty store;
//! [`conformance_tests!`](crate::conformance_tests) expands to one `#[tokio::test]` per invariant
//! so that each shows up by name in the test report.
//!
//! Nothing here depends on the machine being fast: a claim meant to lapse has a 1 ms timeout and
//! the test sleeps well past it; a claim meant to stay live has a one-hour timeout. Test times
//! are whole microseconds, the resolution the store keeps.

mod calls;
mod claim;
mod deliveries;
mod deployments;
mod ends;
mod fixtures;
mod group;
mod intake;
mod leases;
mod outbox;
mod purge;
mod reads;
mod scaling;
mod schedules;
mod steps;
mod tasks;

pub use calls::*;
pub use claim::*;
pub use deliveries::*;
pub use deployments::*;
pub use ends::*;
pub use group::*;
pub use intake::*;
pub use leases::*;
pub use outbox::*;
pub use purge::*;
pub use reads::*;
pub use scaling::*;
pub use schedules::*;
pub use steps::*;
pub use tasks::*;

/// Expands to one `#[tokio::test]` per invariant of the suite, each against a fresh store made by
/// `$fresh`: an expression, evaluated once per test, giving a future whose output dereferences to
/// the store (a `Box`, or a fixture that also owns the database's directory and deletes it on
/// drop). The calling crate needs `tokio` with `macros` and `rt` among its dev-dependencies.
#[macro_export]
macro_rules! conformance_tests {
    ($fresh:expr) => {
        $crate::conformance_tests!(@each $fresh;
            ping_succeeds_on_a_fresh_store,
            claim_refuses_instead_of_waiting,
            claim_increments_the_fence_every_time,
            claim_is_reentrant_for_the_same_owner,
            claim_of_a_missing_instance_is_not_found,
            exactly_one_of_concurrent_claimants_wins,
            stale_claim_is_taken_after_the_timeout,
            commit_and_release_are_one_fact,
            a_refused_member_writes_nothing_and_the_others_commit,
            a_member_refused_for_a_taken_key_writes_nothing_and_the_others_commit,
            a_consuming_settle_whose_fence_moved_leaves_its_message_unconsumed,
            a_member_claim_writes_nothing_and_its_commit_grows_the_fence,
            nothing_of_a_group_is_durable_before_its_commit,
            a_group_claim_of_a_step_in_flight_is_refused,
            each_member_acts_for_its_own_tenant,
            lapsed_holder_cannot_commit,
            fence_refuses_a_stale_token_of_the_same_owner,
            release_gives_the_claim_back,
            release_after_a_lost_claim_changes_nothing,
            sweep_clears_claims_by_age_and_never_parses_owners,
            sweep_leaves_live_claims_alone,
            sweep_counts_consecutive_recoveries_and_reports_poison,
            an_unreadable_instance_is_failed_in_its_row_and_every_claim_refuses_it,
            an_unreadable_mark_is_cleared_only_once_the_snapshot_decodes,
            start_is_owned_by_whoever_inserted_the_inbox_row,
            concurrent_starts_of_one_message_have_one_winner,
            correlation_alias_is_unique,
            disarm_resolves_waits_timers_tasks_and_pending_deliveries,
            asked_delivery_is_durable_and_taken_in_the_commit,
            every_delivery_kind_reads_back_as_asked,
            deferred_delivery_is_not_due_until_its_time,
            due_deliveries_are_oldest_first,
            a_dispatched_delivery_is_not_due_again_until_redeliver_after,
            a_deferral_clears_the_dispatch_count,
            a_failed_step_is_counted_apart_from_refusals_and_keeps_its_error,
            failures_survive_the_hand_out_and_a_deferral,
            two_dispatchers_never_hand_out_the_same_delivery,
            discard_deletes,
            next_due_is_the_earliest_pending_delivery,
            timer_arm_is_a_future_delivery,
            buffered_message_is_matched_in_the_parks_own_transaction,
            buffer_relays_to_a_wait_armed_since_the_intake_looked,
            one_arm_of_a_race_takes_a_buffered_message,
            a_lookup_answers_a_consumed_message_and_otherwise_finds_its_wait,
            a_start_an_instance_waits_for_is_refused_before_it_writes,
            history_sequence_cannot_repeat,
            tenants_never_see_each_others_rows,
            instances_page_by_keyset,
            listings_summarize_and_whole_pages_keep_to_their_budget,
            deploy_makes_version_n_plus_one_active_and_the_previous_draining,
            a_draining_version_retires_only_when_nothing_keeps_it,
            a_row_is_claimed_by_one_sender_at_a_time,
            claims_take_the_oldest_due_rows_first,
            a_stale_claim_is_cleared_and_retried,
            sent_rows_are_never_claimed_again,
            failed_sends_back_off,
            past_max_attempts_a_row_is_poisoned_and_stays_visible,
            the_idempotency_key_is_unique_and_stable,
            tenants_never_see_each_others_outbox,
            a_task_is_locked_by_one_poller_at_a_time,
            a_task_armed_for_a_worker_is_locked_for_it_alone,
            an_eager_lock_that_expires_is_an_attempt_like_any_other,
            a_poll_takes_the_oldest_tasks_of_its_topics_with_their_own_lock,
            an_expired_lock_makes_the_task_available_again,
            a_wrong_or_expired_lock_token_is_refused,
            completing_twice_is_refused,
            a_member_claims_then_completes_and_nothing_else,
            a_member_whose_claim_or_lock_is_refused_leaves_the_task_as_it_was,
            claims_taken_ahead_answer_as_claims_taken_one_by_one,
            kept_settles_land_as_settles_written_one_by_one,
            a_kept_settle_whose_fence_moved_writes_nothing_of_any_kind,
            a_step_after_a_kept_settle_sees_the_key_it_gave_up,
            kept_starts_land_as_starts_written_one_by_one,
            a_kept_start_whose_message_is_taken_writes_nothing_of_any_kind,
            completion_is_recorded_with_the_task_update,
            a_business_error_is_delivered_at_once,
            retries_back_off_then_exhaust,
            a_lock_that_expires_counts_as_an_attempt,
            a_released_task_is_available_again_on_the_same_attempt,
            extend_moves_the_lock_deadline,
            a_disarmed_task_cannot_be_completed,
            only_a_task_parks_disarm_cancels_its_task,
            next_task_at_is_when_a_poll_could_next_take_one,
            tasks_page_by_keyset_and_filter,
            tenants_never_see_each_others_tasks,
            one_holder_at_a_time,
            an_expired_lease_is_taken_and_its_epoch_grows,
            the_holder_renews_without_changing_the_epoch,
            a_released_lease_is_free_at_once,
            the_purger_removes_old_terminal_instances_and_never_failed_ones,
            the_deployment_revision_grows_with_every_deploy,
            the_holder_a_step_records_is_read_by_the_next_claim,
            an_announced_end_is_heard_once_its_commit_lands,
            a_call_inserts_its_children_created_with_their_starts_due_now,
            a_lost_claim_calls_no_child,
            a_disarmed_call_park_asks_cancel_of_its_live_children_only,
            a_childs_ending_commit_reports_to_its_parent_in_the_same_transaction,
            instances_list_exactly_a_parents_children_paged_by_id,
            every_call_delivery_kind_reads_back_as_asked,
            the_retirement_gate_keeps_a_version_while_a_created_child_is_on_it,
            a_cancelled_ancestor_is_found_however_far_up_and_in_its_tenant_only,
            a_synced_schedule_is_listed_and_due_at_its_next_tick,
            a_newer_version_replaces_the_schedule_keeping_paused_and_last_fire,
            an_unchanged_expression_keeps_next_at_across_versions,
            an_older_version_changes_nothing,
            a_flow_the_new_version_no_longer_schedules_loses_its_row,
            concurrent_syncs_leave_the_newest_versions_schedule,
            an_advance_from_a_stale_next_at_writes_nothing,
            a_paused_schedule_is_not_due_and_resumes,
            pausing_an_unknown_schedule_answers_none,
            schedules_are_tenant_scoped,
            a_tenants_backlog_counts_none_of_another_tenants_rows,
        );
    };
    (@each $fresh:expr; $($invariant:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $invariant() {
                let store = $fresh.await;
                $crate::conformance::$invariant(&*store).await;
            }
        )+
    };
}
