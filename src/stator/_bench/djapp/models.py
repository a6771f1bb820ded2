"""The throughput scenario's three no-op steps, as a Django model (no migrations: the child
creates the table with ``migrate --run-syncdb``, database defaults and claim index included)."""

from stator.django.models import StatorModel

from .._models import BenchPlainStates, BenchStates


class BenchDjangoRow(StatorModel):
    state_graph = BenchStates

    class Meta:
        app_label = "stator_bench"
        db_table = "stator_bench_django_rows"


class BenchDjangoPlainRow(StatorModel):
    """The same steps, their handlers given plain rows (``stator bench --plain-rows``)."""

    state_graph = BenchPlainStates

    class Meta:
        app_label = "stator_bench"
        db_table = "stator_bench_django_plain_rows"
