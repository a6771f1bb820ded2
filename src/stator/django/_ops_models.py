"""Read-only Django views of Stator's own tables (created by migration 0001 through the
engine's schema code), for the admin's live workers and recent errors pages."""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.utils import timezone

LIVE_AFTER = timedelta(seconds=30)


class StatorWorker(models.Model):
    id = models.CharField(max_length=64, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()
    concurrency = models.IntegerField()
    model_names = models.TextField(db_column="models", verbose_name="models")
    threads = models.TextField()

    class Meta:
        managed = False
        db_table = "stator_workers"
        app_label = "stator"
        verbose_name = "worker"
        ordering = ("-last_seen",)

    def __str__(self) -> str:
        return f"{self.id} on {self.hostname}"

    @property
    def alive(self) -> bool:
        # The admin's list column: a model property no engine (so no clock) reaches; a
        # wall-clock judgement for the operator, never a decision the engine acts on.
        return bool(timezone.now() - self.last_seen <= LIVE_AFTER)


class StatorError(models.Model):
    id = models.BigAutoField(primary_key=True)
    model = models.CharField(max_length=255)
    row_pk = models.CharField(max_length=255)
    state = models.CharField(max_length=100)
    attempt = models.IntegerField()
    kind = models.CharField(max_length=20)
    message = models.TextField()
    traceback = models.TextField()
    created_at = models.DateTimeField()
    worker_id = models.CharField(max_length=64)

    class Meta:
        managed = False
        db_table = "stator_errors"
        app_label = "stator"
        verbose_name = "error"
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"{self.model} {self.row_pk} in {self.state} (attempt {self.attempt})"
