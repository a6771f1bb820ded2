"""Stator's web dashboard and database metrics (the ``stator[dashboard]`` extra).

``create_app(stator, token=None)`` returns an ASGI app; ``stator dashboard APP`` serves it
with uvicorn.  See the README's "Dashboard and metrics".
"""

from ._app import create_app

__all__ = ["create_app"]
