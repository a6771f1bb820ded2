"""Django tests: settings from ``djtest.settings`` (set up before pytest-django needs them)."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
_OURS = "DJANGO_SETTINGS_MODULE" not in os.environ
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djtest.settings")

import django  # noqa: E402

django.setup()
if _OURS:  # leave no trace for the subprocesses other tests start
    del os.environ["DJANGO_SETTINGS_MODULE"]
