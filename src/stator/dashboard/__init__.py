"""Stator's web dashboard and database metrics (the ``stator[dashboard]`` extra).

``create_app(stator, token=None)`` returns an ASGI app; ``stator dashboard APP`` serves it
with uvicorn.  See docs/operations/dashboard.md.
"""

from ._app import create_app

__all__ = ["create_app"]
