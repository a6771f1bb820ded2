from django.contrib import admin

from stator.django._task_admin import StatorTaskAdmin

from .models import TaskProxy


@admin.register(TaskProxy)
class TaskProxyAdmin(StatorTaskAdmin):
    """A second admin over the tasks table, through a proxy."""
