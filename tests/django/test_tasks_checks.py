"""System checks for the task backend: on Django 5.2 (no ``django.tasks``) configuring it
fails ``manage.py check`` with stator.E020, not an ImportError; on Django 6 bad OPTIONS are
named."""

from __future__ import annotations

import importlib.util

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from stator.django._task_model import check_task_backend

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
BACKEND = "stator.django.tasks.StatorBackend"


@pytest.mark.skipif(HAS_TASKS, reason="Django >= 6.0 has django.tasks")
def test_backend_on_django_without_tasks_fails_the_check_clearly() -> None:
    with override_settings(TASKS={"default": {"BACKEND": BACKEND}}):
        [error] = check_task_backend()
        assert error.id == "stator.E020"
        assert "Django >= 6.0" in error.hint
        with pytest.raises(SystemCheckError, match=r"stator\.E020"):
            call_command("check")


@pytest.mark.skipif(not HAS_TASKS, reason="the task backend needs Django >= 6.0")
def test_bad_options_are_named_by_the_check() -> None:
    from django.tasks import task_backends

    options = {"max_attempts": 0, "keep_results": "a week", "max_arguments_bytes": "1 MiB"}
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "OPTIONS": options}}):
        assert check_task_backend() == []
        ids = [m.id for m in task_backends["default"].check()]
        assert ids == ["stator.E022", "stator.E024", "stator.E023"]
    with override_settings(TASKS={"default": {"BACKEND": BACKEND}}):
        assert task_backends["default"].check() == []


@pytest.mark.skipif(not HAS_TASKS, reason="the task backend needs Django >= 6.0")
def test_bad_limits_are_named_by_the_check() -> None:
    from django.tasks import task_backends

    options = {"QUEUE_LIMITS": {"mail": 0}, "TASK_LIMITS": {"send_mail": 2, "a.b": True}}
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "OPTIONS": options}}):
        messages = [(m.id, m.msg) for m in task_backends["default"].check()]
    assert [i for i, _m in messages] == ["stator.E025"] * 3
    assert "QUEUE_LIMITS" in messages[0][1] and "dotted path" in messages[1][1]
    import tasks_jobs

    good = {"QUEUE_LIMITS": {"mail": 2}, "TASK_LIMITS": {tasks_jobs.shout.module_path: 3}}
    settings = {"BACKEND": BACKEND, "QUEUES": ["default", "mail"], "OPTIONS": good}
    with override_settings(TASKS={"default": settings}):
        assert task_backends["default"].check() == []


@pytest.mark.skipif(not HAS_TASKS, reason="the task backend needs Django >= 6.0")
def test_limits_that_limit_nothing_are_warned_of() -> None:
    """A typo leaves a task or queue unlimited without a word: the check names it."""
    from django.tasks import task_backends

    options = {"QUEUE_LIMITS": {"mail": 2, "mial": 1},
               "TASK_LIMITS": {"tasks_jobs.no_such_task": 1, "tasks_jobs.released": 1,
                               "no_such_module.send": 1, "tasks_alias.loud": 1}}
    settings = {"BACKEND": BACKEND, "QUEUES": ["default", "mail"], "OPTIONS": options}
    with override_settings(TASKS={"default": settings}):
        messages = [(m.id, m.msg) for m in task_backends["default"].check()]
    assert [i for i, _m in messages] == ["stator.W025"] * 5
    texts = "\n".join(m for _i, m in messages)
    assert "'mial'" in texts and "'mail'" not in texts.split("QUEUES")[0]
    assert "'tasks_jobs.no_such_task', which cannot be imported" in texts
    assert "'tasks_jobs.released', which is not a task (a Event" in texts
    assert "'no_such_module.send', which cannot be imported" in texts
    assert "'tasks_alias.loud', which is the task 'tasks_jobs.shout' under another" in texts
    # A backend that takes any queue (QUEUES empty) warns of none.
    anything = {"BACKEND": BACKEND, "QUEUES": [], "OPTIONS": {"QUEUE_LIMITS": {"mial": 1}}}
    with override_settings(TASKS={"default": anything}):
        assert task_backends["default"].check() == []
