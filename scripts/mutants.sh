#!/usr/bin/env bash
# Remove, one at a time, each line that makes Stator safe (and the identifier quoting) from a
# scratch copy of the source, run the fast tests that guard it, and fail if any removal
# survives (its tests still pass).  The working tree is never touched.
#
#   bash scripts/mutants.sh            # the guarding tests of each removal (several minutes:
#                                      # ~3.5 min in CI; 25 min on a busy 2-core machine)
#   MUTANTS_FULL=1 bash scripts/mutants.sh   # the whole fast suite (-m "not slow") per removal
#
# PostgreSQL is expected as for scripts/test.sh (STATOR_TEST_PG to override).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-.venv-test}
PYTHON="$ROOT/$VENV/bin/python"
if [ ! -x "$PYTHON" ]; then
    echo "no $VENV: run scripts/test.sh once first" >&2
    exit 2
fi
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# name | file | exact text to find | its replacement | tests that must fail without it
MUTANTS=$(cat <<'EOF'
skip-locked|src/stator/_store/_dialects/_postgres.py|skip_locked = " FOR UPDATE SKIP LOCKED"|skip_locked = ""|tests/driver/test_driver_claims.py::test_a_claim_passes_by_rows_another_transaction_holds
lease-left|src/stator/_execute.py|write = _policy.release(task.claimed, now)  # not enough lease left to start|pass|tests/test_safety_lines.py::test_a_row_without_lease_left_for_its_deadline_is_handed_back_unstarted
wake-ups|src/stator/_worker/_coordinator.py|self._maybe_due = True\n        self._signals.kick.set()\n\n    def run(|return\n\n    def run(|tests/test_safety_lines.py::test_an_idle_worker_is_woken_by_new_work
hand-back|src/stator/_worker/_coordinator.py|self._handlers.hand_back_unstarted()|pass|tests/test_safety_lines.py::test_a_graceful_stop_hands_unstarted_rows_back_at_once
passed-by-back-off|src/stator/_worker/_coordinator.py|self._look_again_at = time.monotonic() + wait|self._look_again_at = 0.0|tests/test_worker_locked_rows.py::test_a_due_row_locked_elsewhere_is_claimed_with_back_off_not_in_a_loop tests/test_worker_locked_rows.py::test_each_empty_claim_waits_longer_and_a_claim_that_gets_rows_resets_it
idle-passes-locked|src/stator/_worker/_coordinator.py|due = self.store.next_due(self._healthy(), claimable_at=self.clock.now())|due = self.store.next_due(self._healthy())|tests/test_worker_locked_rows.py::test_until_idle_exits_while_a_due_row_is_locked_elsewhere
delete-fence|src/stator/_store/_statements.py|WHERE ({pk}, state, state_next) IN "\n            f"(SELECT v.pk, v.fence_state, v.fence FROM|WHERE ({pk}, state) IN "\n            f"(SELECT v.pk, v.fence_state FROM|tests/driver/test_driver_writes.py::test_a_delete_under_an_expired_lease_is_refused
claim-fair-share|src/stator/_store/_statements.py|    share = _share_cte(table, pk, states, d, extra, order, handled)|    share = ""|tests/driver/test_driver_claims.py::test_a_claim_of_several_states_locks_only_the_rows_it_takes
claim-fair-share-level|src/stator/_store/_dialects/_postgres.py|f"WHERE {total} >= :limit), :limit)"|f"WHERE {total} >= 1), :limit)"|tests/driver/test_driver_claims.py::test_a_claim_of_several_states_locks_only_the_rows_it_takes tests/engine/test_engine_behaviour.py::test_claims_are_shared_fairly_between_states
write-fence|src/stator/_store/_statements.py|f"AND {table}.state_next = v.fence RETURNING|f"RETURNING|tests/driver/test_driver_writes.py::test_a_write_under_an_expired_lease_is_refused tests/engine/test_engine_schedules.py::test_a_worker_whose_lease_ran_out_cannot_fire tests/driver/test_driver_hooks.py::test_write_columns_are_set_by_the_fenced_write_and_only_where_the_fence_held
sqlite-write-fence|src/stator/_store/_statements.py|fence = "state = ?6 AND state_next = ?7"|fence = "state = ?6 AND ?7 IS NOT NULL"|tests/driver/test_driver_writes.py::test_a_write_under_an_expired_lease_is_refused tests/engine/test_engine_schedules.py::test_a_worker_whose_lease_ran_out_cannot_fire tests/driver/test_driver_hooks.py::test_write_columns_are_set_by_the_fenced_write_and_only_where_the_fence_held
quoting|src/stator/_store/_tracked.py|quoted_table=quote.format_table(table),\n            quoted_pk=quote.quote(pks[0].name),\n            quoted_columns=[quote.quote(c.name) for c in table.c],|quoted_table=table.name, quoted_pk=pks[0].name,\n            quoted_columns=[c.name for c in table.c],|tests/test_quoting.py tests/driver/test_driver_schema.py::test_names_that_need_quotes_go_through_every_operation
paused|src/stator/_store/_statements.py|extra += f" AND NOT EXISTS (SELECT 1 FROM stator_paused|extra += "" and f" AND NOT EXISTS (SELECT 1 FROM stator_paused|tests/dashboard/test_http.py::test_pause_stops_claims_until_resumed
dashboard-origin|src/stator/dashboard/_auth.py|    if not same_origin(origin, referer, scheme, host):\n        return Refusal(403, cross_site(|    if False:\n        return Refusal(403, cross_site(|tests/dashboard/test_http.py::test_posts_are_refused_without_a_token_or_from_another_site
dashboard-session|src/stator/dashboard/_auth.py|            self._live.pop(session.id, None)|            pass|tests/dashboard/test_access.py::test_signing_out_ends_the_session_on_the_server
dashboard-logout-csrf|src/stator/dashboard/_signin.py|            await d.refuse_unless_allowed(request)\n            d.sessions.end(session)|            d.sessions.end(session)|tests/dashboard/test_access.py::test_signing_out_ends_the_session_on_the_server
dashboard-csrf|src/stator/dashboard/_auth.py|    if not same(csrf, session.csrf):|    if False:|tests/dashboard/test_http.py::test_posts_are_refused_without_a_token_or_from_another_site
dashboard-read-auth|src/stator/dashboard/_guard.py|        if found.signed_in or self.open(request.url.path):|        if True:|tests/dashboard/test_access.py::test_with_a_token_every_route_is_refused_to_strangers
dashboard-host|src/stator/dashboard/_guard.py|        if not host_allowed(request.headers.get("host"), self.allowed):|        if False:|tests/dashboard/test_access.py::test_only_known_host_names_are_answered
dashboard-body-limit|src/stator/dashboard/_guard.py|        if size > MAX_BODY:\n            return None|        if False:\n            return None|tests/dashboard/test_access.py::test_a_large_body_is_refused_before_anything_reads_it
dashboard-forwarded-for|src/stator/cli/dashboard.py|proxy_headers=bool(proxies)|proxy_headers=True|tests/dashboard/test_processes.py::test_x_forwarded_for_is_believed_only_from_a_trusted_proxy
dashboard-backoff-ipv6|src/stator/dashboard/_auth.py|    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:|    if False:|tests/dashboard/test_access.py::test_wrong_tokens_from_one_ipv6_network_share_their_wait
dashboard-headers-500|src/stator/dashboard/_app.py|        return _guard.SecurityHeaders(super().build_middleware_stack())|        return super().build_middleware_stack()|tests/dashboard/test_access.py::test_every_answer_carries_the_security_headers
dashboard-fence|src/stator/_store/_operator_actions.py|        return [this, table.c.state == seen_state, table.c.state_next == seen_next]|        return [this]|tests/dashboard/test_http.py::test_move_is_checked_against_the_graph_and_fenced tests/django/test_admin_actions.py::test_a_stale_admin_move_is_refused_by_the_fence
dashboard-fence-sqlite|src/stator/_store/_operator_actions.py|    if found != seen_next:|    if False:|tests/dashboard/test_http.py::test_move_is_checked_against_the_graph_and_fenced tests/django/test_admin_actions.py::test_a_stale_admin_move_is_refused_by_the_fence
one-move-sources|src/stator/_store/_apply_move.py|update(table).where(table.c.state.in_(move.sources), *where)|update(table).where(*where)|tests/test_transitions.py::test_transition_perform_raises_if_someone_moved_the_row_first tests/test_transitions.py::test_stator_transition_many_moves_only_rows_with_an_edge
one-move-edge|src/stator/_moves.py|if state is None or target is None or name not in state.children:|if state is None or target is None:|tests/test_transitions.py::test_transition_perform_refuses_a_missing_edge tests/dashboard/test_http.py::test_move_is_checked_against_the_graph_and_fenced tests/engine/test_engine_app_models.py::test_transition_perform_is_checked_and_fenced
admin-move-permission|src/stator/django/admin.py|, permissions=["change"])(move)|)(move)|tests/django/test_admin_actions.py::test_a_view_only_staff_user_gets_no_stator_action
admin-retry-permission|src/stator/django/admin.py|(make waiting rows due at once)", permissions=["change"])|(make waiting rows due at once)")|tests/django/test_admin_actions.py::test_a_view_only_staff_user_gets_no_stator_action
dashboard-escaping|src/stator/dashboard/_context.py|autoescape=select_autoescape(default=True, default_for_string=True)|autoescape=False|tests/dashboard/test_http.py::test_row_data_and_error_messages_are_rendered_as_text
extra-fence|src/stator/_store/_operations.py|extras = [w for w in updates if w.extra is not None and w.pk in applied]|extras = [w for w in updates if w.extra is not None]|tests/test_write_hooks.py::test_extra_is_not_written_when_the_fence_no_longer_holds tests/driver/test_driver_hooks.py::test_extra_is_written_with_the_fenced_write_and_only_where_the_fence_held
unreadable-set-aside|src/stator/_store/_unreadable.py|    for _ in range(CLAIM_TRIES - 1):|    for _ in range(0):|tests/test_unreadable_rows.py::test_a_row_that_cannot_be_read_is_recorded_and_set_aside_and_the_rest_run
unreadable-due-time|src/stator/_store/_unreadable.py|    except (ValueError, TypeError, OverflowError):\n        due =|    except ZeroDivisionError:\n        due =|tests/test_unreadable_rows.py::test_status_and_the_idle_check_read_past_a_due_time_they_cannot_read
unreadable-write|src/stator/_store/_operations.py|            if not _unreadable.is_unwritable(exc):|            if True:|tests/test_unreadable_rows.py::test_a_row_whose_history_the_database_refuses_costs_that_row_only
unreadable-dashboard-row|src/stator/_store/_unreadable.py|    bad = set(_bad_columns(conn, tracked, key)) - {"state_attempts"}|    bad: set[str] = set()|tests/dashboard/test_untrusted_input.py::test_a_row_holding_a_value_that_cannot_be_read_is_shown_and_can_be_moved
unreadable-admin-time|src/stator/_store/_dialects/_postgres.py|        return f"({clamp})", 3|        return sql, 1|tests/django/test_admin_actions.py::test_a_row_holding_a_time_python_cannot_hold_is_listed_shown_and_offered
history-not-a-list|src/stator/_store/_dialects/_sqlite.py|WHEN 'array' THEN {history} |WHEN json_type({history}) THEN {history} |tests/test_unreadable_rows.py::test_a_history_that_is_json_but_not_a_list_keeps_it_and_gains_the_move
sqlite-begin-error|src/stator/_store/_dialects/_sqlite.py|        raise DBAPIError.instance(statement, (), exc, error) from exc|        raise|tests/driver/test_driver_claims.py::test_a_claim_that_finds_sqlite_busy_raises_sqlalchemys_error
sqlite-write-error|src/stator/_store/_operations.py|            raise DBAPIError.instance(sql, None, exc, sqlite3.Error) from exc|            raise|tests/test_worker_edges.py::test_a_write_back_the_database_refuses_is_logged_and_the_rows_run_again
writer-any-error|src/stator/_worker/_writer.py|                except Exception:  # an error no driver's wrapper holds|                except ZeroDivisionError:  # an error no driver's wrapper holds|tests/test_worker_edges.py::test_a_write_back_that_fails_with_a_bug_loses_that_batch_only
writer-died|src/stator/_worker/_writer.py|        except BaseException as exc:  # SystemExit from a write hook|        except ZeroDivisionError as exc:  # SystemExit from a write hook|tests/test_worker_edges.py::test_a_writer_thread_that_dies_ends_the_worker_with_the_reason
raw-claim-error|src/stator/_store/_raw_claim.py|            raise error from exc|            raise|tests/driver/test_driver_claims.py::test_a_claim_the_database_refuses_raises_sqlalchemys_error
raw-claim-lost|src/stator/_store/_raw_claim.py|            lost = self._dialect.is_disconnect(exc, dbapi, cursor)|            lost = False|tests/driver/test_driver_claims.py::test_a_claim_whose_connection_was_lost_says_so_and_the_next_claim_reconnects
raw-claim-invalidate|src/stator/_store/_raw_claim.py|                conn.invalidate(exc)|                pass|tests/driver/test_driver_claims.py::test_a_claim_whose_connection_was_lost_says_so_and_the_next_claim_reconnects
claim-priority|src/stator/_store/_statements.py|order = "state_next" if priority is None else f"{priority} DESC, state_next"|order = "state_next"|tests/test_write_hooks.py::test_claims_take_the_highest_priority_first tests/driver/test_driver_claims.py::test_claims_take_the_highest_priority_first
claim-stamps|src/stator/_store/_statements.py|END{copy}{stamps} "|END{copy} "|tests/test_write_hooks.py::test_the_claim_stamps_the_rows_it_takes_up_for_a_handler tests/driver/test_driver_hooks.py::test_the_claim_stamps_the_rows_it_takes_up_for_a_handler
limit-running|src/stator/_store/_limit_statements.py|f"AND state_next > :now AND {lease} = state_next")|f"AND 1 = 0")|tests/driver/test_driver_limits.py::test_a_claim_takes_no_more_than_the_states_room
limit-running-key|src/stator/_store/_limit_statements.py|AND state_next > :now AND {lease} = state_next "|AND 1 = 0 "|tests/driver/test_driver_limits.py::test_each_key_gets_its_own_room
limit-lock|src/stator/_store/_dialects/_postgres.py|return f"SELECT pg_advisory_xact_lock(|return None and f"SELECT pg_advisory_xact_lock(|tests/driver/test_driver_limits.py::test_concurrent_claims_never_overshoot tests/processes/test_limit_processes.py
claim-stamps-first|src/stator/_store/_statements.py|value = f"COALESCE({column}, :now)" if when == "first" else ":now"|value = ":now"|tests/test_write_hooks.py::test_the_claim_stamps_the_rows_it_takes_up_for_a_handler tests/driver/test_driver_hooks.py::test_the_claim_stamps_the_rows_it_takes_up_for_a_handler
claim-stamps-handled|src/stator/_store/_statements.py|f", {column} = CASE WHEN state IN ({handled}) THEN {value} ELSE {column} END"|f", {column} = {value}"|tests/test_write_hooks.py::test_the_claim_stamps_the_rows_it_takes_up_for_a_handler tests/driver/test_driver_hooks.py::test_the_claim_stamps_the_rows_it_takes_up_for_a_handler
failure-extra|src/stator/_execute.py|        return dataclasses.replace(write, extra=hook(task.obj, write, task.error))|        return write|tests/test_write_hooks.py::test_a_failure_write_carries_the_models_own_record_of_it
priority-quoting|src/stator/_store/_tracked.py|priority=None if priority is None else quote.quote(priority),|priority=priority,|tests/test_write_hooks.py::test_claims_take_the_highest_priority_first tests/driver/test_driver_claims.py::test_claims_take_the_highest_priority_first
one-statement-kinds|src/stator/_store/_operations.py|return len(kinds) == 1 and all(|return all(|tests/test_round_trips.py::test_moves_and_deletes_in_one_write_back_keep_their_transaction
one-statement-failures|src/stator/_store/_operations.py|all(w.failure is None and w.extra is None for w in writes)|all(w.extra is None for w in writes)|tests/test_round_trips.py::test_a_write_back_with_a_failure_keeps_its_transaction
one-statement-extra|src/stator/_store/_operations.py|all(w.failure is None and w.extra is None for w in writes)|all(w.failure is None for w in writes)|tests/test_write_hooks.py::test_extra_is_written_with_the_batched_transition
claim-joined-durable|src/stator/_store/_django.py|                sql = tracked.sql.claim_joined or sql|                pass|tests/django/test_django_app.py::test_a_claim_inside_a_django_transaction_leaves_its_commit_durable
django-sqlite-rows|src/stator/_store/_django.py|        return raw if isinstance(raw, sqlite3.Connection) else None|        return None|tests/django/test_django_app.py::test_sqlite_write_backs_run_row_by_row_on_djangos_connection
hung-cap|src/stator/_worker/_handlers.py|        if self.hung > self._options.hung_cap:|        if False:|tests/worker/test_handlers.py::test_no_more_than_max_hung_hung_threads_are_replaced
handler-deadline-slot|src/stator/_worker/_handlers.py|                    current[name] = task|                    pass|tests/worker/test_handlers.py::test_a_handler_past_its_deadline_is_abandoned_and_its_thread_replaced
abandoned-slot-cleared|src/stator/_worker/_handlers.py|                self._current.pop(task.thread, None)|                pass|tests/worker/test_handlers.py::test_a_handler_past_its_deadline_is_abandoned_and_its_thread_replaced
results-taken-back|src/stator/_worker/_handlers.py|            self._board.take_back(len(taken))|            pass|tests/worker/test_handlers.py::test_the_coordinator_is_woken_when_the_last_results_are_in
rows-taken-counted|src/stator/_worker/_handlers.py|                    taken.n += 1|                    pass|tests/worker/test_handlers.py::test_the_coordinator_is_woken_when_the_last_results_are_in
last-results-kick|src/stator/_worker/_handlers.py|                    kick.set()  # the last slice is done: its results are in|                    pass|tests/worker/test_handlers.py::test_the_coordinator_is_woken_when_the_last_results_are_in
died-row-result|src/stator/_worker/_handlers.py|            if task is not None and task.finish():  # not abandoned by ``tend`` meanwhile|            if False:|tests/worker/test_handlers.py::test_a_handler_thread_that_dies_is_replaced
slice-abandoned-rest|src/stator/_worker/_handlers.py|                self._requeue_rest(task.thread)|                pass|tests/worker/test_handlers.py::test_the_rest_of_a_slice_runs_when_its_thread_is_abandoned_or_dies
slice-died-rest|src/stator/_worker/_handlers.py|            self._requeue_rest(name)|            pass|tests/worker/test_handlers.py::test_the_rest_of_a_slice_runs_when_its_thread_is_abandoned_or_dies
slice-hand-back|src/stator/_worker/_handlers.py|for held in list(self._slices.values()):|for held in []:|tests/test_safety_lines.py::test_a_graceful_stop_hands_unstarted_rows_back_at_once
slice-take-others|src/stator/_worker/_slices.py|    for other in list(slices.values()):|    for other in []:|tests/worker/test_handlers.py::test_a_free_thread_takes_the_rows_waiting_behind_a_slow_one
handler-settle|src/stator/_worker/_handlers.py|                    self._executor.scopes.settle()|                    pass|tests/worker/test_handlers.py::test_a_handler_thread_settles_its_scope_before_it_waits
scope-kept-statement|src/stator/_store/_django_scopes.py|        self._ran = True|        pass|tests/django/test_django_app.py::test_a_handler_threads_atomic_block_is_kept_only_across_untouched_tasks
scope-kept-callback|src/stator/_store/_django_scopes.py|self._ran or conn.run_on_commit or|self._ran or|tests/django/test_django_app.py::test_a_handler_threads_atomic_block_is_kept_only_across_untouched_tasks
scope-kept-opt-in|src/stator/_store/_django_scopes.py|keep = self._park if getattr(self._local, "keep", False) else None|keep = self._park|tests/django/test_django_app.py::test_a_handler_threads_atomic_block_is_kept_only_across_untouched_tasks
unseen-writes-swallow|src/stator/_worker/_listener.py|            write(self._books)\n            return True|            write(self._books)\n            self._last = self._conn.execute("PRAGMA data_version").fetchone()[0]\n            return True|tests/worker/test_wakeups.py::test_a_commit_of_another_connection_beside_our_own_heartbeat_still_wakes_sqlite
unseen-writes-connection|src/stator/_worker/_listener.py|self._books = Bookkeeping.on_sqlite_connection(conn)|self._books = Bookkeeping.on_sqlite_connection(sqlite3.connect(path, check_same_thread=False))|tests/worker/test_wakeups.py::test_the_workers_own_heartbeats_do_not_read_as_a_change_sqlite
file-events-slow-poll|src/stator/_worker/_listener.py|self._written(events, SQLITE_SLOW_POLL)|self._written(events, None)|tests/worker/test_wakeups.py::test_a_commit_whose_file_event_is_missed_is_seen_by_the_slow_poll_sqlite
file-events-look-again|src/stator/_worker/_listener.py|                    looks = 0  # checked at once|                    looks = len(SQLITE_LOOKS)  # checked at once|tests/worker/test_wakeups.py::test_after_a_file_event_the_listener_looks_again_until_the_commit_shows_sqlite
probe-closes|src/stator/_worker/_listener.py|until it ends).\n            self._store.thread_done()|until it ends).\n            pass|tests/django/test_store_conditions.py::test_a_worker_with_persistent_connections_holds_a_bounded_number[writing-and-not]
async-loop-closes|src/stator/_worker/_handlers.py|                loop.run_until_complete(self._executor.store.loop_done())|                pass|tests/django/test_store_conditions.py::test_async_handlers_may_use_the_async_orm[worker-pg]
async-base-exception|src/stator/_execute.py|asyncio.wait_for(_contained(handler(task.obj)), task.timeout)|asyncio.wait_for(handler(task.obj), task.timeout)|tests/worker/test_handlers.py::test_an_async_handler_raising_a_base_exception_is_a_failure[sqlite-exit]
async-base-exception-caught|src/stator/_execute.py|        except BaseException as raised:|        except Exception as raised:|tests/worker/test_handlers.py::test_an_async_handler_raising_a_base_exception_is_a_failure[sqlite-cancelled]
plain-row-settle|src/stator/_execute.py|            self.scopes.settle()\n            session: HandlerScope = NO_WRITES|            session: HandlerScope = NO_WRITES|tests/engine/test_engine_plain_rows.py::test_a_plain_rows_handler_runs_outside_the_atomic_block_its_thread_kept
plain-row-read-only|src/stator/_plain_rows.py|        raise PlainRowError(self._refusal(f"setting {name!r}"))|        object.__setattr__(self, name, value)|tests/engine/test_engine_plain_rows.py::test_setting_an_attribute_of_a_plain_row_fails_the_attempt_and_says_how_to_opt_out
async-error-drop|src/stator/_execute.py|            await self.store.after_async_error()|            pass|tests/django/test_store_conditions.py::test_async_handlers_get_a_new_connection_once_theirs_is_lost
sqlite-text-second|src/stator/_time_text.py|            end = start + _SECOND|            end = start + _SECOND * 3600|tests/test_sqlite_text.py::test_times_close_together_share_no_text_they_should_not
launcher-name-refusal|src/stator/_launcher/_discovery.py|            if problem is not None:|            if False:|tests/launcher/test_secrets.py::test_server_names_with_url_syntax_are_skipped_and_said_once
launcher-url-parts|src/stator/_launcher/_children.py|    return URL.create(**parts)|    return __import__("sqlalchemy").make_url(URL.create(**parts).render_as_string(hide_password=False))|tests/launcher/test_secrets.py::test_url_parts_come_back_as_the_same_url
schedule-not-early|src/stator/_schedule.py|    if due > now:\n        return Plan((), 0, due)|    if False:\n        return Plan((), 0, due)|tests/test_schedule_core.py::test_a_row_claimed_before_its_tick_fires_nothing
schedule-removed|src/stator/_schedules.py|            if name not in declared and row.state != "disabled":|            if False:|tests/engine/test_engine_schedules.py::test_schedules_follow_the_code
EOF
)

# Every guarding test must exist before any mutant is tried: pytest fails on an id it cannot
# find, which would otherwise count as the mutant being killed.  One collection of them all;
# each id must name at least one collected test (itself, its parametrizations, or a file's).
unguarded=$(cut -d'|' -f1,5 <<< "$MUTANTS" | "$PYTHON" -c '
import subprocess, sys
table = [line.split("|", 1) for line in sys.stdin.read().splitlines() if line.strip()]
ids = sorted({test for _, tests in table for test in tests.split()})

def collected(selection):
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", *selection], capture_output=True, text=True)
    return run.returncode, [line for line in run.stdout.splitlines() if "::" in line]

code, nodes = collected(ids)
if code != 0:  # some id is not found: collect one at a time to say which
    nodes = [node for test in ids for node in collected([test])[1]]
for name, tests in table:
    for test in tests.split():
        if not any(node == test or node.startswith((test + "[", test + "::")) for node in nodes):
            print(f"{name}: {test}")
')
if [ -n "$unguarded" ]; then
    while IFS= read -r line; do
        echo "ERROR: guarding test collects nothing (missing or renamed), mutant not tried: $line"
    done <<< "$unguarded"
fi

survived=()
while IFS='|' read -r name file find replace tests; do
    [ -n "$name" ] || continue
    if grep -q "^$name: " <<< "$unguarded"; then
        continue
    fi
    rm -rf "$SCRATCH/copy"
    mkdir "$SCRATCH/copy"
    cp -r src tests pyproject.toml "$SCRATCH/copy/"
    "$PYTHON" - "$SCRATCH/copy/$file" "$find" "$replace" <<'PY'
import sys
path, find, replace = sys.argv[1], *(a.encode().decode("unicode_escape") for a in sys.argv[2:])
text = open(path).read()
if text.count(find) != 1:
    sys.exit(f"mutant does not apply: {find!r} found {text.count(find)} times in {path}")
open(path, "w").write(text.replace(find, replace))
PY
    if [ "${MUTANTS_FULL:-}" = "1" ]; then
        selection=(tests -m "not slow")
    else
        read -r -a selection <<< "$tests"
    fi
    echo "== $name: ${selection[*]}"
    if (cd "$SCRATCH/copy" && PYTHONPATH="$SCRATCH/copy/src" PYTHONDONTWRITEBYTECODE=1 \
            "$PYTHON" -m pytest -q -x -p no:cacheprovider "${selection[@]}" >"$SCRATCH/log" 2>&1); then
        echo "   SURVIVED: the tests pass without it"
        survived+=("$name")
    else
        echo "   killed ($(tail -n 1 "$SCRATCH/log"))"
    fi
done <<< "$MUTANTS"

if [ -n "$unguarded" ]; then
    echo "mutants whose guarding tests are missing: $(cut -d: -f1 <<< "$unguarded" | sort -u | tr '\n' ' ')" >&2
fi
if [ ${#survived[@]} -gt 0 ]; then
    echo "mutants that survived: ${survived[*]}" >&2
    exit 1
fi
if [ -n "$unguarded" ]; then
    exit 2
fi
echo "every mutant killed"
