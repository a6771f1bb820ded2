"""The in-request runner, for hosts without long-running processes (as Takahē offers).

``path("stator/run/", stator.django.views.run_batch)``; a cron job or uptime pinger POSTs
with ``Authorization: Bearer <settings.STATOR["TOKEN"]>`` and each request runs one bounded
cycle: one claimed batch per model, handlers run, results written, within
``STATOR["RUN_BUDGET"]`` seconds (10; or ``path(..., run_batch, {"budget": 5})``), each
handler within its state's timeout (see ``_in_request``).  The answer is JSON counts.
"""

from __future__ import annotations

import functools
import hmac
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .._stator import Stator
from ._in_request import DEFAULT_BUDGET, run_in_request, too_many_abandoned
from ._setup import build_stator, stator_settings

BATCH_LIMIT = 100


@functools.lru_cache(maxsize=4)
def _stator_for(alias: str, batch_size: int) -> Stator:
    """One per process: building the engine costs a few queries, not worth each request."""
    return build_stator(alias=alias, batch_size=batch_size)


@csrf_exempt
def run_batch(request: HttpRequest, budget: float | None = None) -> HttpResponse:
    token = stator_settings().get("TOKEN")
    if not token:
        return HttpResponse(status=404)  # the runner is off: as if there were no such page
    if request.method != "POST":
        return HttpResponse(status=405, headers={"Allow": "POST"})
    given = request.headers.get("Authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        value.strip().encode(), str(token).encode()
    ):
        return HttpResponse(status=403)
    conf = stator_settings()
    seconds = float(budget if budget is not None else conf.get("RUN_BUDGET") or DEFAULT_BUDGET)
    refusal = too_many_abandoned()
    if refusal is not None:
        return JsonResponse({"error": refusal}, status=503, headers={"Retry-After": "60"})
    stator = _stator_for(str(conf["DATABASE"]), min(int(conf["BATCH_SIZE"]), BATCH_LIMIT))
    report = run_in_request(stator, seconds)
    body: dict[str, Any] = {**report.as_json(), "budget": seconds}
    return JsonResponse(body)
