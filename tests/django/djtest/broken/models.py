from django.db import models

from djtest.orders.models import JobStates
from stator.django.models import StatorModel


class Forgotten(StatorModel):  # no state_graph
    name = models.CharField(max_length=20)


class Takahe(StatorModel):
    state_graph = JobStates
    state_locked_until = models.DateTimeField(null=True)
    state_history = models.TextField(null=True)
