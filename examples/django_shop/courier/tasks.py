from django.tasks import TaskContext, task

from . import remote
from .models import Pickup


@task(queue_name="courier", backend="courier", takes_context=True)
def book_pickup(context: TaskContext, order_id: int) -> str:
    """Book a courier; a failed call raises, and the backend retries with backoff."""
    booking = remote.book(order_id, context.attempt)
    Pickup.objects.update_or_create(
        order_id=order_id, defaults={"booking": booking, "attempts": context.attempt},
    )
    return booking
