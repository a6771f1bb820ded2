"""A module of tasks that fails to import (a task whose module broke since it was enqueued)."""

import a_module_that_is_not_installed  # noqa: F401
