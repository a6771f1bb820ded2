"""Fixtures for tests that run real ``stator run`` worker processes.

Each test gets ``proc_app``: an empty database (a SQLite file in ``tmp_path``, or a fresh
schema in a throwaway PostgreSQL database made for this test session), a copy of
``app_fixture.py`` in ``tmp_path`` for the workers to import, and helpers to start workers,
run other ``stator`` commands and look at the database.  Every process a test starts is
killed and reaped when the test ends, whatever its outcome.  The helpers live in
``procs.py``, shared with ``tests/faults/``.
"""

from .procs import proc_app, proc_db_url

__all__ = ["proc_app", "proc_db_url"]
