"""Names a package exports but imports on first use (PEP 562's module ``__getattr__``).

``stator`` and ``stator._store`` export names that stand on SQLAlchemy; a Django process that
only loads its apps, saves rows or enqueues tasks reaches into both packages for what needs
none of it, and must not pay a quarter of a second to import the toolkit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_names(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name of ``homes`` (name →
    the relative module it lives in) when first asked for, then keeps it in ``namespace``
    (the package's ``globals()``), so the next lookup is an ordinary one."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home, package), name)
        namespace[name] = value
        return value

    return __getattr__
