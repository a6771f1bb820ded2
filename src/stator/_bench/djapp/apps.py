from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "stator._bench.djapp"
    label = "stator_bench"
    default_auto_field = "django.db.models.BigAutoField"
