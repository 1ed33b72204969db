//! The `Store` conformance suite: behaviour every implementation must show, written
//! against `&dyn Store` only, so the SQLite and the PostgreSQL store run the very same
//! checks. One file per record kind of the store (`users.rs` holds users and their
//! credentials), with what they build on in `fixtures.rs`; [`conformance`] runs them
//! all, in one order.
//!
//! Each check makes its own user, project and sessions with fresh ids, so checks do
//! not see each other's rows and the suite can run twice on one database (the file
//! test reopens a store that already holds a previous pass). The global operations
//! (`fail_running_runs`, `all_pending_approvals`) are handled inside their checks
//! (see there). The races take stores as `Arc`s because their tasks are spawned, and
//! a slice of them so a backend shared by several processes can race several handles
//! (nodes) against each other; the suite itself races one.

mod approvals;
mod attachments;
mod branches;
mod drafts;
mod fixtures;
mod idempotency;
mod messages;
mod nodes;
mod notes;
mod outbox;
mod projects;
mod push;
mod queue;
mod reverts;
mod run_frames;
mod runs;
mod sessions;
mod step_snapshots;
mod users;

pub use approvals::*;
pub use attachments::*;
pub use branches::*;
pub use drafts::*;
pub use fixtures::*;
pub use idempotency::*;
pub use messages::*;
pub use nodes::*;
pub use notes::*;
pub use outbox::*;
pub use projects::*;
pub use push::*;
pub use queue::*;
pub use reverts::*;
pub use run_frames::*;
pub use runs::*;
pub use sessions::*;
pub use step_snapshots::*;
pub use users::*;

use spool_engine::Store;
use std::sync::Arc;

/// How many tasks each race of the suite spawns.
pub const RACERS: usize = 20;

/// Runs every check in order.
pub async fn conformance(shared: Arc<dyn Store>) {
    let store = shared.as_ref();
    users_are_created_once(store).await;
    projects_round_trip_in_creation_order(store).await;
    sessions_list_by_archived_flag_newest_first(store).await;
    sessions_keep_their_permission_rules(store).await;
    sessions_keep_their_own_guardrails(store).await;
    one_rule_is_removed_only_while_it_is_the_one_named(store).await;
    concurrent_removals_of_one_rule_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    search_finds_titles_and_message_text_of_one_owner_newest_first_in_pages(store).await;
    messages_round_trip_for_every_role_and_content_kind(store).await;
    a_taken_message_index_is_a_conflict(store).await;
    list_messages_pages_backwards_from_before(store).await;
    latest_rounds_starts_at_the_nth_last_user_message(store).await;
    copy_messages_copies_a_prefix_with_new_ids_all_or_nothing(store).await;
    insert_run_is_idempotent_per_request_id(store).await;
    start_run_writes_the_run_and_its_prompt_together(store).await;
    update_run_writes_the_mutable_fields(store).await;
    fail_running_runs_touches_only_running_runs(store).await;
    drafts_are_appended_and_orphaned_once_their_run_settles(store).await;
    interrupt_run_writes_the_approval_and_the_run_together(store).await;
    pending_approvals_are_listed_oldest_first(store).await;
    waiting_sessions_are_those_with_a_pending_approval(store).await;
    settle_approval_decides_once(store).await;
    supersede_replaces_an_approval_whose_call_has_not_started(store).await;
    concurrent_settles_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    idempotency_keys_replay_the_first_response(store).await;
    concurrent_claims_of_one_key_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    session_memory_is_replaced_whole_and_deleted_with_the_session(store).await;
    todo_lists_are_replaced_whole_and_deleted_with_the_session(store).await;
    tool_source_choices_are_kept_per_source_and_deleted_with_the_session(store).await;
    tokens_are_found_by_hash_until_revoked(store).await;
    login_sessions_end_by_logout_expiry_and_revocation(store).await;
    the_auth_flag_and_listeners_are_kept(store).await;
    runs_since_lists_a_sessions_runs_from_an_index_in_order(store).await;
    run_frames_come_back_in_order_and_retention_prunes_them_by_age(store).await;
    step_snapshots_are_recorded_once_completed_by_their_after_and_listed_in_order(store).await;
    retention_deletes_old_step_records_and_the_trees_named_are_the_rest(store).await;
    shelving_moves_turns_off_the_path_whole_and_unshelving_puts_them_back(store).await;
    a_branch_shelved_inside_another_is_a_version_only_of_its_own_path(store).await;
    a_sessions_pending_revert_is_replaced_whole_and_deleted_with_the_session(store).await;
    a_projects_pending_reverts_are_read_together_and_a_final_one_is_left_out(store).await;
    deleting_a_session_removes_its_messages_runs_and_approvals(store).await;
    deleting_a_project_removes_everything_under_it(store).await;
    attachments_bind_once_count_per_owner_and_leave_with_their_session(store).await;
    unbound_attachments_are_deleted_one_by_one_or_by_age_and_bound_ones_never(store).await;
    leases_are_taken_renewed_and_released(store).await;
    writes_held_to_a_lease_stop_when_it_changes_hands(store).await;
    a_fenced_writer_racing_a_takeover_lands_nothing_after_it(std::slice::from_ref(&shared)).await;
    concurrent_lease_acquisitions_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    queued_prompts_wait_in_order_within_their_limit(store).await;
    a_queued_message_keeps_its_files(store).await;
    a_paused_queue_is_left_out_until_resumed(store).await;
    queued_prompts_are_bounded_per_owner_by_count_and_bytes(store).await;
    sessions_are_counted_per_owner_and_projects_listed_for_all(store).await;
    taking_a_queued_prompt_inserts_its_run_once(store).await;
    a_steer_is_taken_into_its_run_once(store).await;
    concurrent_takes_of_one_queued_prompt_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    each_change_writes_its_event_once_and_a_loser_none(store).await;
    fan_out_writes_one_delivery_per_target_and_claims_and_records_under_a_lease(store).await;
    an_asks_delivery_is_found_by_its_approval_and_target(store).await;
    concurrent_claims_never_share_a_delivery(std::slice::from_ref(&shared), RACERS).await;
    a_disabled_webhook_stays_disabled_until_enabled(store).await;
    a_server_key_keeps_its_first_writers_secret(store).await;
    a_push_subscription_is_kept_per_endpoint_and_removed_with_its_login(store).await;
}
