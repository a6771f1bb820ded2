from typing import Any

from django.db import migrations


def running_to_ready(apps: Any, schema_editor: Any) -> None:
    """Tasks an earlier version left in ``running`` (a state no longer in the graph) go back
    to ``ready``, keeping their ``state_next``: a task still held by an old worker's lease is
    claimed again only when that lease ends."""
    task = apps.get_model("stator", "StatorTask")
    task.objects.using(schema_editor.connection.alias).filter(state="running").update(
        state="ready")


class Migration(migrations.Migration):

    dependencies = [
        ("stator", "0007_schedules"),
    ]

    operations = [
        migrations.RunPython(running_to_ready, migrations.RunPython.noop),
    ]
