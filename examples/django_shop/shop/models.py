from django.db import models
from stator import State, StateGraph
from stator.django.models import StatorModel

class OrderStates(StateGraph):
    new = State(retry_after=30)
    charged = State(externally_progressed=True)
    shipped = State()
    new.transitions_to(charged)
    charged.transitions_to(shipped)

    @classmethod
    def check_new(cls, order):            # receives the Django model instance
        if not order.paid:
            return None
        from .tasks import send_receipt
        Receipt.objects.create(order=order)   # commits with the transition, or not at all
        send_receipt.enqueue(order.pk)        # ditto: a rolled-back handler enqueues nothing
        return cls.charged

class Order(StatorModel):
    state_graph = OrderStates
    paid = models.BooleanField(default=False)
    state_history = models.JSONField(null=True, blank=True)  # optional: [state, timestamp] per move

class Receipt(models.Model):
    order = models.OneToOneField(Order, on_delete=models.CASCADE)
