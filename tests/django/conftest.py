"""Django tests: settings from ``djtest.settings`` (set up before pytest-django needs them)."""

import djangosetup

djangosetup.configure()
