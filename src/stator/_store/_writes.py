"""Does this SQL write?  The one answer for code that watches a handler's statements as
Django sends them (its handler transaction, a task's savepoint).

A statement that changes data or schema, or takes a savepoint, is a write: on SQLite each
takes the database's write lock, and each must commit with the handler's transition (or be
undone with the task that ran it).  Reads, including ``SELECT ... FOR UPDATE``, are not.
"""

from __future__ import annotations

WRITE_PREFIXES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "SAVEPOINT", "CREATE", "DROP", "ALTER")


def writes(sql: str) -> bool:
    """Whether ``sql`` (as sent to the database) writes."""
    return sql.lstrip()[:10].upper().startswith(WRITE_PREFIXES)
