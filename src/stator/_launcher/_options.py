"""What ``stator launcher run`` was asked to do: its flags, as one object.

Kept apart from the supervisor so that the command line builds it without importing the
machinery it configures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._place import DEFAULT_PLACE


@dataclass
class LauncherOptions:
    app: str
    discover: Sequence[str] = ()
    databases: Sequence[str] = ()
    max_workers: int = 4
    control: Path = DEFAULT_PLACE
    discover_every: float = 10.0
    poll_every: float = 1.0
    idle_window: float = 5.0
    slice: float = 60.0
    stop_grace: float = 10.0
    backoff_floor: float = 5.0
    backoff_max: float = 300.0
    listen_max: int = 32
    concurrency: int | None = None
    log_level: str = "INFO"
    cwd: Path = field(default_factory=Path.cwd)
