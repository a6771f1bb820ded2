"""How full each concurrency limit is: running rows per limited state and, for a limit per
key, the busiest keys (what the dashboard, ``/metrics`` and ``stator status`` show).

Running is what the claim counts (``_limit_statements``): in the state, ``state_next`` still
the lease copied into the lease column, and still in the future.  Only running rows are
read, through the claim index's ``state_next > now`` range: however many rows wait, a read
costs the running rows (at most the limits' sum) and the rows scheduled later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import text

if TYPE_CHECKING:
    from .interface import Driver as Store

BUSIEST = 5  # keys shown per limited state, the busiest first


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """One limit: running rows of ``state`` (of ``key``, or of the whole state when None)
    against ``limit`` (None: a value a per-value limit does not list)."""

    model: str
    state: str
    key: str | None
    running: int
    limit: int | None

    @property
    def saturation(self) -> float:
        """Running / limit (1.0: full); 0.0 without a limit."""
        return self.running / self.limit if self.limit else 0.0


@dataclass(frozen=True, slots=True)
class StateLimit:
    """A limited state: its running rows in all, and its busiest keys' (``keys``; empty for
    a limit on the whole state, whose usage is ``whole``)."""

    model: str
    state: str
    key_column: str | None
    running: int
    whole: LimitUsage | None
    keys: tuple[LimitUsage, ...]

    @property
    def saturation(self) -> float:
        """The fullest limit of the state: the whole state's, or its fullest key's."""
        usages = [self.whole] if self.whole is not None else list(self.keys)
        return max((u.saturation for u in usages), default=0.0)


def limit_usage(store: Store, now: datetime, busiest: int = BUSIEST) -> list[StateLimit]:
    """Every limited state of every model, in declaration order (a state under several
    limits once per limit: a task's queue, then its own)."""
    out: list[StateLimit] = []
    bound = {"now": store.dialect.ts(now)}
    with store.engine.connect() as conn:
        for t in store.tracked:
            also = [(n, one) for n, more in t.also_limits.items() for one in more]
            for name, (most, key) in [*t.limits.items(), *also]:
                running = (f"FROM {t.quoted_table} WHERE state = '{name}' "
                           f"AND state_next > :now AND {t.lease_column} = state_next")
                if key is None:
                    count = int(conn.execute(text(f"SELECT count(*) {running}"),
                                             bound).scalar_one())
                    whole = LimitUsage(t.name, name, None, count, _limit_of(most, None))
                    out.append(StateLimit(t.name, name, None, count, whole, ()))
                    continue
                rows = conn.execute(text(
                    f"SELECT {key}, count(*) {running} GROUP BY {key} "
                    f"ORDER BY count(*) DESC, {key}"
                ), bound).all()
                keys = tuple(
                    LimitUsage(t.name, name, str(value), int(n), _limit_of(most, str(value)))
                    for value, n in rows[:busiest]
                )
                column = key.strip('"')  # as quoted for the SQL; shown bare
                out.append(StateLimit(t.name, name, column, sum(int(n) for _v, n in rows),
                                      None, keys))
        conn.rollback()
    return out


def _limit_of(most: int | Mapping[str, int], value: str | None) -> int | None:
    if isinstance(most, Mapping):
        return None if value is None else most.get(value)
    return most
