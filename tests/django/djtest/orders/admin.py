from django.contrib import admin

from stator.django.admin import StatorAdmin

from .models import Job, Order


@admin.register(Order)
class OrderAdmin(StatorAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "paid")


@admin.register(Job)
class JobAdmin(StatorAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    stator_graph_format = "dot"
