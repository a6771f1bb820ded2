"""The Django-only parts: admin, in-request runner, testing helpers, bulk moves, checks."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import models
from django.test.utils import isolate_apps
from djtest.orders.models import ERRAND_RELEASE, Errand, Job, Order, OrderStates, Receipt

from stator import ManualClock, State, StateGraph
from stator.django import _in_request, checks
from stator.django._ops_models import StatorError
from stator.django._setup import stator_settings
from stator.django.models import StatorModel
from stator.django.testing import assert_path, path_of, run_until_idle
from stator.errors import ConfigError

TOKEN = "s3cret-token"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC) + timedelta(seconds=5))


# -- testing helpers, inside the test's transaction (TestCase style) ----------------------


@pytest.mark.django_db(databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_run_until_idle_and_assert_path(clock: ManualClock, alias: str) -> None:
    """Inside the test's own transaction (TestCase style), on both databases."""
    order = Order.objects.using(alias).create(paid=True)
    unpaid = Order.objects.using(alias).create(paid=False)
    report = run_until_idle(clock=clock, models=[Order], using=alias)
    assert report.transitions == 1
    assert_path(order, OrderStates.new, OrderStates.charged)
    assert Receipt.objects.using(alias).filter(order=order).count() == 1
    order.transition_perform(OrderStates.shipped)
    assert_path(order, "new", "charged", "shipped")
    with pytest.raises(AssertionError, match="went new -> charged -> shipped"):
        assert_path(order, "new", "shipped")
    unpaid.paid = True
    unpaid.save()  # leaves the engine's fields alone: still not due for 30 s
    assert run_until_idle(clock=clock, models=[Order], using=alias).claimed == 0
    clock.advance(31)
    run_until_idle(clock=clock, models=[Order], using=alias)
    assert path_of(unpaid) == ["charged"]


@pytest.mark.django_db(databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_saving_a_stale_instance_keeps_the_lease_and_claim_stamps(alias: str) -> None:
    """A row read before a worker claimed it, saved after: the worker's lease and the claim's
    stamps stay (``StatorTask`` has both), only the application's fields are written."""
    from stator.django._task_model import StatorTask

    now = datetime.now(UTC).replace(microsecond=0)
    StatorTask.objects.using(alias).create(
        id="t-1", task_path="x.y", queue_name="default", backend="default", priority=0,
        args_kwargs={"args": [], "kwargs": {}}, enqueued_at=now, state_next=now)
    stale = StatorTask.objects.using(alias).get(id="t-1")
    lease = now + timedelta(minutes=5)
    StatorTask.objects.using(alias).filter(id="t-1").update(  # what a claim does
        leased_until=lease, started_at=now, last_attempted_at=now)
    stale.priority = 7
    stale.save()
    row = StatorTask.objects.using(alias).get(id="t-1")
    assert row.priority == 7
    assert (row.leased_until, row.started_at, row.last_attempted_at) == (lease, now, now)


@pytest.mark.django_db
def test_run_until_idle_raises_a_handlers_error_unless_told_not_to(clock: ManualClock) -> None:
    Job.objects.create(kind="fail")
    with pytest.raises(ValueError, match="failed"):
        run_until_idle(clock=clock, models=[Job])
    clock.advance(3600)
    report = run_until_idle(clock=clock, models=[Job], raise_errors=False)
    assert report.errors == 1


@pytest.mark.django_db
def test_queryset_transition_perform_moves_only_rows_with_an_edge() -> None:
    new = Order.objects.create()
    charged = Order.objects.create()
    charged.transition_perform(OrderStates.charged)
    assert Order.objects.all().transition_perform(OrderStates.shipped) == 1
    assert Order.objects.get(pk=charged.pk).state == "shipped"
    assert Order.objects.get(pk=new.pk).state == "new"


@pytest.mark.django_db(databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_queryset_transition_perform_moves_only_the_querysets_rows(alias: str) -> None:
    """The queryset's own filter (a join, a LIKE with its own percent signs) limits the one
    move; what ``QuerySet.update`` refuses, it refuses; an empty queryset moves nothing."""
    orders = Order.objects.using(alias)
    with_receipt, plain, discounted = (orders.create(note=n) for n in ("", "", "50% off"))
    Receipt.objects.using(alias).create(order=with_receipt)
    assert orders.filter(receipt__isnull=False).transition_perform(OrderStates.charged) == 1
    assert orders.filter(note__contains="0% o").transition_perform(OrderStates.charged) == 1
    assert orders.filter(state="new").count() == 1
    assert orders.get(pk=plain.pk).state == "new"
    assert path_of(orders.get(pk=discounted.pk)) == ["charged"]
    assert orders.none().transition_perform(OrderStates.charged) == 0
    with pytest.raises(TypeError, match="slice"):
        orders.all()[:1].transition_perform(OrderStates.charged)
    assert orders.filter(state="new").count() == 1


# -- the in-request runner ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_run_batch_answers_and_runs(client: Any, settings: Any) -> None:
    Order.objects.create(paid=True)
    assert client.get("/stator/run/").status_code == 405
    assert client.post("/stator/run/").status_code == 403
    wrong = client.post("/stator/run/", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    done = client.post("/stator/run/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert done.status_code == 200
    body = json.loads(done.content)
    assert body["transitions"] == 1 and body["per_model"]["orders_order"] == 1
    assert Order.objects.get().state == "charged"
    settings.STATOR = {}
    assert client.post("/stator/run/", headers={"Authorization": f"Bearer {TOKEN}"}
                       ).status_code == 404


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_run_batch_records_exit_and_interrupt_and_runs_their_batch_mates(
    client: Any, settings: Any, alias: str
) -> None:
    """SystemExit and KeyboardInterrupt from a handler are that row's failure: recorded, an
    attempt counted; the other rows run, and the next request is no 500 either."""
    settings.STATOR = {**settings.STATOR, "DATABASE": alias}
    errands = Errand.objects.using(alias)
    exits = errands.create(kind="exit")
    interrupts = errands.create(kind="interrupt")
    fine = errands.create()
    done = client.post("/stator/run/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert done.status_code == 200
    body = json.loads(done.content)
    assert (body["claimed"], body["errors"], body["transitions"]) == (3, 2, 1)
    assert errands.get(pk=fine.pk).state == "done"
    for row, kind in ((exits, "SystemExit"), (interrupts, "KeyboardInterrupt")):
        again = errands.get(pk=row.pk)
        assert (again.state, again.state_attempts) == ("pending", 1)
        assert kind in StatorError.objects.using(alias).get(row_pk=str(row.pk)).message
    assert client.post("/stator/run/", headers={"Authorization": f"Bearer {TOKEN}"}
                       ).status_code == 200


@pytest.fixture
def hanging() -> Iterator[None]:
    ERRAND_RELEASE.clear()
    yield
    ERRAND_RELEASE.set()
    for thread in list(_in_request._abandoned):
        thread.join(10)


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_run_batch_enforces_a_handlers_timeout_and_bounds_abandoned_threads(
    client: Any, hanging: None, monkeypatch: pytest.MonkeyPatch, settings: Any, alias: str
) -> None:
    monkeypatch.setattr(_in_request, "MAX_ABANDONED", 1)
    settings.STATOR = {**settings.STATOR, "DATABASE": alias}
    errands = Errand.objects.using(alias)
    hung = errands.create(kind="hang")  # its state's timeout is 0.5 s
    fine = errands.create()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = json.loads(client.post("/stator/run/", headers=auth).content)
    assert (body["timeouts"], body["errors"], body["transitions"]) == (1, 1, 0)
    assert errands.get(pk=hung.pk).state_attempts == 1
    # The batch's lease (2 x 0.5 s) no longer holds a whole timeout: handed back unstarted.
    assert errands.get(pk=fine.pk).state_attempts == 0
    error = StatorError.objects.using(alias).get(row_pk=str(hung.pk))
    assert error.kind == "timeout" and "ERRAND_RELEASE.wait" in error.traceback
    refused = client.post("/stator/run/", headers=auth)  # the abandoned thread still runs
    assert refused.status_code == 503 and "abandoned" in json.loads(refused.content)["error"]
    ERRAND_RELEASE.set()
    for thread in list(_in_request._abandoned):
        thread.join(10)
    assert json.loads(client.post("/stator/run/", headers=auth).content)["transitions"] == 1
    assert errands.get(pk=fine.pk).state == "done"


@pytest.mark.django_db(transaction=True)
def test_run_batch_ends_within_its_budget_and_hands_the_rest_back(
    client: Any, hanging: None, settings: Any
) -> None:
    settings.STATOR = {**settings.STATOR, "RUN_BUDGET": 2.0}
    rows = [Errand.objects.create(kind="hang", state="slow") for _ in range(3)]  # 30 s each
    body = json.loads(client.post("/stator/run/", headers={"Authorization": f"Bearer {TOKEN}"}
                                  ).content)
    assert (body["timeouts"], body["handed_back"], body["budget"]) == (1, 2, 2.0)
    attempts = sorted(Errand.objects.filter(pk__in=[r.pk for r in rows])
                      .values_list("state_attempts", flat=True))
    assert attempts == [0, 0, 1]  # handed back unstarted: no attempt counted
    for wrong in ("10s", 0, float("nan"), True):
        settings.STATOR = {**settings.STATOR, "RUN_BUDGET": wrong}
        with pytest.raises(ConfigError, match="RUN_BUDGET"):
            stator_settings()


# -- the admin ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_admin_state_column_graph_and_actions(admin_client: Any, clock: ManualClock) -> None:
    order = Order.objects.create()
    shipped = Order.objects.create()
    shipped.transition_perform(OrderStates.charged)
    shipped.transition_perform(OrderStates.shipped)
    page = admin_client.get("/admin/orders/order/").content.decode()
    assert "column-state" in page and "?state=new" in page
    change = admin_client.get(f"/admin/orders/order/{order.pk}/change/").content.decode()
    assert "stateDiagram-v2" in change and "OrderStates__new --&gt; OrderStates__charged" in change
    job = Job.objects.create()
    assert "digraph" in admin_client.get(f"/admin/orders/job/{job.pk}/change/").content.decode()
    asked = admin_client.post("/admin/orders/order/", {
        "action": "stator_move_to_charged", "_selected_action": [order.pk, shipped.pk],
    }).content.decode()
    assert "1 other selected row(s) will be left alone" in asked
    [seen] = re.findall(r'name="stator_seen" value="([^"]*)"', asked)
    moved = admin_client.post("/admin/orders/order/", {
        "action": "stator_move_to_charged", "_selected_action": [order.pk, shipped.pk],
        "stator_seen": [html.unescape(seen)], "post": "yes",
    }, follow=True).content.decode()
    assert "1 row(s) moved to charged" in moved and "1 row(s) left alone" in moved
    assert Order.objects.get(pk=order.pk).state == "charged"
    assert Order.objects.get(pk=shipped.pk).state == "shipped"
    waiting = Job.objects.create(kind="later")
    run_until_idle(clock=clock, models=[Job])
    assert Job.objects.get(pk=waiting.pk).state_next > clock.now()
    admin_client.post("/admin/orders/job/", {
        "action": "stator_retry_now", "_selected_action": [waiting.pk],
    })
    assert Job.objects.get(pk=waiting.pk).state_next <= datetime.now(UTC)


@pytest.mark.django_db(transaction=True)
def test_admin_errors_and_workers_pages(admin_client: Any, clock: ManualClock) -> None:
    failing = Job.objects.create(kind="fail")
    run_until_idle(clock=clock, models=[Job], raise_errors=False)
    errors = admin_client.get("/admin/stator/statorerror/").content.decode()
    assert f">{failing.pk}<" in errors and "ValueError" in errors
    assert admin_client.get("/admin/stator/statorworker/").status_code == 200


# -- checks ---------------------------------------------------------------------------------


@isolate_apps("djtest.orders")
def test_bad_field_overrides_are_errors() -> None:
    class Wrong(StatorModel):
        state_graph = OrderStates
        state = models.IntegerField()  # type: ignore[assignment]
        state_history = models.TextField()
        state_ready = models.BooleanField()

        class Meta:
            app_label = "orders"

    found = {(e.id, e.msg.split(" ")[0]) for e in checks._field_problems(Wrong)}
    assert found == {("stator.E002", "Wrong.state"), ("stator.E003", "Wrong.state_history"),
                     ("stator.E004", "Wrong.state_ready")}


class PerDomain(StateGraph):
    send = State(timeout=10, max_running=2, limit_key="domain")
    sent = State()
    send.transitions_to(sent)

    @classmethod
    def check_send(cls, row: Any) -> State:
        return cls.sent


@isolate_apps("djtest.orders")
def test_a_limit_key_must_be_not_null_and_indexed() -> None:
    class Nullable(StatorModel):
        state_graph = PerDomain
        domain = models.CharField(max_length=50, null=True)

        class Meta:
            app_label = "orders"

    class Unindexed(StatorModel):
        state_graph = PerDomain
        domain = models.CharField(max_length=50)

        class Meta:
            app_label = "orders"

    class Indexed(StatorModel):
        state_graph = PerDomain
        domain = models.CharField(max_length=50)

        class Meta:
            app_label = "orders"
            indexes = [models.Index(fields=["state", "domain", "state_next"], name="by_domain",
                                    condition=models.Q(state_next__isnull=False))]

    [null] = checks._limit_problems(Nullable)
    assert null.id == "stator.E005" and "NOT NULL" in null.msg
    [unindexed] = checks._limit_problems(Unindexed)
    assert unindexed.id == "stator.W002" and "(state, domain, state_next)" in unindexed.msg
    assert list(checks._limit_problems(Indexed)) == []


def test_sqlite_not_in_wal_mode_is_warned(settings: Any, tmp_path: Path) -> None:
    import sqlite3

    from django.db import connections

    path = tmp_path / "rollback.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    conn = connections["default"]
    saved = dict(conn.settings_dict)
    try:
        conn.settings_dict.update(NAME=str(path), OPTIONS={})
        (warning,) = checks.check_sqlite_wal()
        assert warning.id == "stator.W001" and "init_command" in warning.hint
        conn.settings_dict["OPTIONS"] = {"init_command": "PRAGMA journal_mode=WAL;"}
        assert checks.check_sqlite_wal() == []
    finally:
        conn.settings_dict.clear()
        conn.settings_dict.update(saved)


# -- transactions and wake-ups --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sqlite_claims_take_the_write_lock_up_front(settings: Any, clock: ManualClock) -> None:
    """Whatever the project's transaction_mode: a deferred BEGIN could fail mid-claim."""
    from django.db import connections

    from stator.django._setup import build_stator

    Order.objects.create(paid=True)
    store = build_stator(models=[Order], clock=clock).store
    conn = connections["default"]
    conn.ensure_connection()
    seen: list[str] = []
    conn.connection.set_trace_callback(seen.append)
    try:
        [(obj, claimed)] = store.claim(store.tracked[0], clock.now(), 10)
    finally:
        conn.connection.set_trace_callback(None)
    began = [s.split(" (")[0][:15] for s in seen if s.startswith(("BEGIN", "WITH", "COMMIT"))]
    assert began == ["BEGIN IMMEDIATE", "WITH due AS", "COMMIT"]
    assert isinstance(obj, Order) and obj.paid and claimed.state == "new"


@pytest.mark.django_db(transaction=True)
def test_sqlite_write_backs_run_row_by_row_on_djangos_connection(clock: ManualClock) -> None:
    """Django lends its sqlite3 connection wrapped: the store must still find it and run the
    fenced write once per row, not the slower one-statement JSON form."""
    from django.db import connections

    from stator import _policy
    from stator.django._setup import build_stator

    Order.objects.bulk_create([Order(paid=False) for _ in range(3)])
    store = build_stator(models=[Order], clock=clock).store
    (tracked,) = store.tracked
    writes = [_policy.move(c, OrderStates.charged, clock.now())
              for _obj, c in store.claim(tracked, clock.now(), 10)]
    conn = connections["default"]
    seen: list[str] = []
    conn.connection.set_trace_callback(seen.append)
    try:
        assert store.write_all([(tracked, writes)], "w1") == {tracked.name: set()}
    finally:
        conn.connection.set_trace_callback(None)
    updates = [s for s in seen if s.startswith("UPDATE")]
    assert len(updates) == 3 and not any("json_each" in s for s in updates), updates
    assert set(Order.objects.values_list("state", flat=True)) == {"charged"}


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_application_moves_wake_workers_on_commit(alias: str) -> None:
    from django.db import connections, transaction

    from stator import _local_wakeups
    from stator._store._django import wake_key

    woken: list[int] = []
    key = wake_key(alias)
    _local_wakeups.subscribe(key, lambda: woken.append(1))
    try:
        order = Order.objects.using(alias).create()
        with transaction.atomic(using=alias):
            order.transition_perform(OrderStates.charged)
            assert woken == []  # not before the commit: the worker would not see the row
        assert woken == [1]
    finally:
        _local_wakeups.unsubscribe(key, woken.append)
    if connections[alias].vendor == "postgresql":  # other processes: the insert trigger
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname = %s",
                           ["stator_notify_orders_order"])
            assert cursor.fetchone() == (1,)


def _prepared_claims(alias: str) -> int:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements "
                       "WHERE statement LIKE %s", ["WITH due AS%"])
        (count,) = cursor.fetchone()
    return int(count)


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_postgres_claims_are_prepared_unless_the_project_sets_a_threshold(
    clock: ManualClock,
) -> None:
    """The claim is planned once per connection, not on every call; a project that set
    ``prepare_threshold`` (None behind a transaction-pooling PgBouncer) is obeyed."""
    from django.db import connections

    from stator.django._setup import build_stator

    Order.objects.using("pg").bulk_create([Order(paid=False) for _ in range(12)])
    store = build_stator(models=[Order], clock=clock, alias="pg").store
    for _ in range(6):
        assert len(store.claim(store.tracked[0], clock.now(), 1)) == 1
    assert _prepared_claims("pg") == 1
    conn = connections["pg"]
    options = conn.settings_dict["OPTIONS"]
    conn.close()
    conn.settings_dict["OPTIONS"] = {**options, "prepare_threshold": None}
    try:
        store = build_stator(models=[Order], clock=clock, alias="pg").store
        for _ in range(6):
            assert len(store.claim(store.tracked[0], clock.now(), 1)) == 1
        assert _prepared_claims("pg") == 0
    finally:
        conn.close()
        conn.settings_dict["OPTIONS"] = options


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_a_claim_inside_a_django_transaction_leaves_its_commit_durable(
    clock: ManualClock,
) -> None:
    """A claim on its own commits without waiting for the disk (a lost claim is an expired
    lease); one that joins the caller's ``atomic`` block must not relax the caller's commit."""
    from django.db import connections, transaction

    from stator.django._setup import build_stator

    Order.objects.using("pg").bulk_create([Order(paid=False) for _ in range(2)])
    store = build_stator(models=[Order], clock=clock, alias="pg").store

    def synchronous_commit() -> str:
        with connections["pg"].cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return str(cursor.fetchone()[0])

    with transaction.atomic(using="pg"):
        assert len(store.claim(store.tracked[0], clock.now(), 1)) == 1
        assert synchronous_commit() == "on"
    assert len(store.claim(store.tracked[0], clock.now(), 1)) == 1  # on its own
    assert synchronous_commit() == "on"  # the relaxed commit ended with the claim


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_a_postgres_claim_on_a_lost_connection_fails_as_the_worker_expects(
    clock: ManualClock,
) -> None:
    """The claim runs on Django's psycopg connection directly: its errors must still be
    SQLAlchemy's, classed transient, and the next claim must reconnect."""
    from django.db import connections
    from sqlalchemy.exc import OperationalError

    from stator._outage import is_transient
    from stator.django._setup import build_stator

    Order.objects.using("pg").bulk_create([Order(paid=False) for _ in range(2)])
    store = build_stator(models=[Order], clock=clock, alias="pg").store
    assert len(store.claim(store.tracked[0], clock.now(), 1)) == 1
    with connections["pg"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    s = connections["pg"].settings_dict
    with psycopg.connect(host=s["HOST"], port=s["PORT"], user=s["USER"], dbname=s["NAME"],
                         autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(OperationalError) as caught:
        store.claim(store.tracked[0], clock.now(), 1)
    assert is_transient(caught.value)
    assert len(store.claim(store.tracked[0], clock.now(), 1)) == 1  # reconnected


@pytest.mark.django_db
def test_migrations_hold_literals_not_the_graph() -> None:
    """A renamed graph or a removed state must not break old migrations."""
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command("makemigrations", "orders", dry_run=True, verbosity=3, stdout=out)
    text = out.getvalue()
    assert "('state', models.CharField(db_default='new', default='new', max_length=100))" in text
    assert "stator.django.fields.NowPlus(0.0)" in text
    assert "condition=models.Q(('state_next__isnull', False))" in text
    assert "fields=['state', 'state_next']" in text
    assert "OrderStates" not in text and "JobStates" not in text


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_on_commit_callbacks_run_once_the_transition_is_committed(alias: str) -> None:
    from djtest.orders.models import SENT, Note

    from stator.django._setup import build_stator

    SENT.clear()
    note = Note.objects.using(alias).create()
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=5))
    report = build_stator(models=[Note], clock=clock, alias=alias).run_once()
    assert report.transitions == 1
    assert [note.pk] == SENT
    assert Note.objects.using(alias).get(pk=note.pk).state == "sent"


def test_bad_settings_are_config_errors(settings: Any) -> None:
    from stator import ConfigError
    from stator.django._setup import stator_settings

    settings.STATOR = {"CONCURRENCY": "four"}
    with pytest.raises(ConfigError, match=r"STATOR\['CONCURRENCY'\] must be a whole number"):
        stator_settings()
    settings.STATOR = ["CONCURRENCY"]
    with pytest.raises(ConfigError, match="must be a dict"):
        stator_settings()


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_a_handler_threads_atomic_block_is_kept_only_across_untouched_tasks(
    alias: str,
) -> None:
    """A handler thread (``keep_between_tasks``) keeps its atomic block open for the next
    task only while no statement ran in it and nothing waits for its commit: then no
    database transaction is open.  Anywhere else (inline runs) the block always closes."""
    from django.db import connections, transaction

    from stator.django._setup import build_stator

    store = build_stator(models=[Order], alias=alias).store
    conn = connections[alias]
    inline = store.handler_scopes()
    inline.for_thread(None).release()
    assert not conn.in_atomic_block
    scopes = store.handler_scopes()
    scopes.keep_between_tasks()
    try:
        first = scopes.for_thread(None)
        first.release()
        assert conn.in_atomic_block  # kept: the next task opens nothing
        assert scopes.for_thread(None) is first
        assert Order.objects.using(alias).count() == 0  # a statement ran
        first.release()
        assert not conn.in_atomic_block
        if alias == "pg":
            assert conn.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        second = scopes.for_thread(None)
        assert second is not first
        transaction.on_commit(lambda: None, using=alias)
        second.release()
        assert not conn.in_atomic_block  # a callback waited for a commit
        scopes.for_thread(None).release()
        assert conn.in_atomic_block
        scopes.settle()
        assert not conn.in_atomic_block
    finally:
        scopes.settle()


# -- issue 20, item 7: a row the engine cannot read costs that row only -------------------------


GARBAGE = {"sqlite": "'garbage'", "postgresql": "'infinity'"}


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_a_row_the_worker_cannot_read_is_set_aside_and_the_rest_run(alias: str) -> None:
    from django.db import connections

    from stator.django._setup import build_stator

    jobs = Job.objects.using(alias).bulk_create([Job() for _ in range(5)])
    poisoned = jobs[2].pk
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE orders_job SET state_changed = {GARBAGE[connection.vendor]} "
                       f"WHERE id = {int(poisoned)}")
    stator = build_stator(models=[Job], alias=alias, concurrency=2)
    assert stator.worker(until_idle=True, idle_window=0).run().reason == "idle"
    found = dict(Job.objects.using(alias).values_list("pk", "state_attempts"))
    assert found.pop(poisoned) == 1
    assert set(Job.objects.using(alias).exclude(pk=poisoned).values_list("state", flat=True)) \
        == {"done"}
    errors = [e for e in stator.status()["errors"] if e["row_pk"] == str(poisoned)]
    assert [e["kind"] for e in errors] == ["unreadable"]
    assert "state_changed" in errors[0]["message"]
