"""The throughput scenario's three no-op steps, as a Django model (no migrations: the child
creates the table with ``migrate --run-syncdb``, database defaults and claim index included)."""

from stator.django.models import StatorModel

from .._models import BenchStates


class BenchDjangoRow(StatorModel):
    state_graph = BenchStates

    class Meta:
        app_label = "stator_bench"
        db_table = "stator_bench_django_rows"
