from django.tasks import task
from .models import Order, OrderStates

@task(queue_name="mail")
def send_receipt(order_id: int) -> str:
    Order.objects.get(pk=order_id).transition_perform(OrderStates.shipped)
    return f"sent {order_id}"

@task
def add(a: int, b: int) -> int:
    return a + b
