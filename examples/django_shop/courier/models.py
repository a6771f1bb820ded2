from django.db import models


class Pickup(models.Model):
    """A courier booked for a paid order (by the ``book_pickup`` task)."""

    order = models.OneToOneField("shop.Order", on_delete=models.CASCADE)
    booking = models.CharField(max_length=40)
    attempts = models.PositiveSmallIntegerField()
