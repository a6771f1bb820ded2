"""Steps of the example shop's end-to-end test, each run in a fresh process inside the shop.

``python shop_steps.py STEP`` (cwd: the shop project) prints one JSON object.  Run as a
separate process so that each step sees the database as another program would.
"""

import json
import os
import sys
from datetime import timedelta


def setup() -> None:
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shopsite.settings")
    import django

    django.setup()


def before() -> dict[str, object]:
    """Orders by three routes, and the tasks of the contract."""
    from django.db import connection, transaction
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.utils import timezone
    from shop.models import Order
    from shop.tasks import add

    Order.objects.create(paid=True)
    Order.objects.create(paid=False)
    Order.objects.bulk_create([Order(paid=True), Order(paid=False), Order(paid=True)])
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO shop_order (paid) VALUES (%s), (%s)", [True, False])
    fresh = [(o.state, o.state_next is not None and o.state_next <= timezone.now())
             for o in Order.objects.all()]

    added = add.enqueue(2, 3)
    deferred = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    with transaction.atomic():
        rolled_back = add.enqueue(4, 4)
        transaction.set_rollback(True)
    try:
        add.get_result(rolled_back.id)
        rolled_back_found = True
    except TaskResultDoesNotExist:
        rolled_back_found = False
    try:
        add.enqueue(object(), 1)
        unserialisable = "accepted"
    except TypeError as exc:
        unserialisable = f"TypeError: {exc}"
    return {
        "fresh": fresh, "added": added.id, "added_status": str(added.status),
        "refreshed_status": str(add.get_result(added.id).status),
        "deferred": deferred.id, "rolled_back_found": rolled_back_found,
        "unserialisable": unserialisable,
    }


def after() -> dict[str, object]:
    from courier.models import Pickup
    from django.tasks import task_backends
    from shop.models import Order, Receipt

    from stator.django.models import StatorTask

    orders = [
        {"id": o.pk, "paid": o.paid, "state": o.state,
         "history": [h[0] for h in o.state_history or []],
         "receipts": Receipt.objects.filter(order=o).count()}
        for o in Order.objects.order_by("pk")
    ]
    tasks = []
    for row in StatorTask.objects.order_by("enqueued_at"):
        result = task_backends[row.backend].get_result(row.pk)
        tasks.append({
            "id": row.pk, "task": row.task_path, "status": str(result.status),
            "return_value": result.return_value if str(result.status) == "SUCCESSFUL" else None,
            "attempts": result.attempts, "errors": [e.exception_class_path for e in result.errors],
        })
    pickups = {p.order_id: p.attempts for p in Pickup.objects.all()}
    return {"orders": orders, "tasks": tasks, "pickups": pickups}


if __name__ == "__main__":
    setup()
    print(json.dumps({"before": before, "after": after}[sys.argv[1]](), default=str))
