"""The launcher: one supervisor running one scheduler per database (after TimescaleDB's
launcher), sharing a fixed budget of worker slots between many databases.

Modules, one concept each:

``_machine``     the per-database state machine as data, and the slot pool (pure)
``_messages``    start/stop/restart as rows in the target database, sent transactionally
``_discovery``   which databases exist: a PostgreSQL server, a SQLite glob, explicit URLs
``_tenant``      what the launcher reads and writes in one database
``_children``    scheduler processes: start, watch, stop, leftovers
``_listener``    LISTEN on many PostgreSQL databases from one thread
``_place``       the control place: lock, state file, wake-up FIFO, logs
``_scheduler``   the scheduler's own side (follow the sender, check the schema, lifeline)
``_supervisor``  the loop that ties them together
``_report``      ``stator launcher-status``: the state file made readable
"""

from ._messages import Reply, Sent, send_message
from ._steps import DbState, Message
from ._supervisor import Launcher, LauncherOptions

__all__ = ["DbState", "Launcher", "LauncherOptions", "Message", "Reply", "Sent", "send_message"]
