"""A proxy of the tasks backend's model (a second admin over the tasks table).  An app of its
own, with a migration: a model in an app without migrations cannot inherit from one in an app
with them (``stator``)."""

from stator.django.models import StatorTask


class TaskProxy(StatorTask):
    class Meta:
        proxy = True
