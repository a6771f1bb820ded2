from django.core.management.base import BaseCommand
from django.db import transaction
from shop.models import Order

from courier.tasks import book_pickup


class Command(BaseCommand):
    help = "Place N orders (two in three paid) and book a courier for each paid one."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("count", type=int)

    def handle(self, *args, count: int, **options):  # type: ignore[no-untyped-def]
        with transaction.atomic():  # the orders and their bookings commit together
            for i in range(count):
                order = Order.objects.create(paid=i % 3 != 2)
                if order.paid:
                    book_pickup.enqueue(order.pk)
        self.stdout.write(f"placed {count} orders")
