from django.contrib import admin

from stator.django.admin import StatorAdmin

from .models import Job, Order, PaidOrder


@admin.register(Order)
class OrderAdmin(StatorAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "paid")


@admin.register(Job)
class JobAdmin(StatorAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    stator_graph_format = "dot"


@admin.register(PaidOrder)
class PaidOrderAdmin(StatorAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    """A second admin over the orders table, through a proxy."""

