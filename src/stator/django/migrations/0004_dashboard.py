"""Stator schema version 3 (paused models, the dashboard's action log, per-edge stats),
applied by the same versioned schema code ``stator migrate`` runs."""

from typing import Any

from django.db import migrations


def upgrade(apps: Any, schema_editor: Any) -> None:
    from stator.django._setup import install_schema

    install_schema(schema_editor.connection.alias)


class Migration(migrations.Migration):
    dependencies = [("stator", "0003_workers_errors")]
    # Reversing 0001 drops every Stator table, these included; nothing to undo here alone.
    operations = [migrations.RunPython(upgrade, migrations.RunPython.noop)]
