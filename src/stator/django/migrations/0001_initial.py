"""Stator's own tables (workers, stats, errors, launcher messages), created by the same
versioned schema code ``stator migrate`` runs, inside this migration's transaction."""

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from stator.django._setup import install_schema

    install_schema(schema_editor.connection.alias)


def uninstall(apps: Any, schema_editor: Any) -> None:
    from stator.django._setup import uninstall_schema

    uninstall_schema(schema_editor.connection.alias)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(install, uninstall)]
