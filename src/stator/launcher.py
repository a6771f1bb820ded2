"""Talking to a running ``stator launcher`` from application code.

``send_message(connection_or_session, "restart")`` inserts the message inside the caller's
own transaction: it reaches the launcher when the caller commits, and never if the caller
rolls back.  Wait for the launcher's answer after committing::

    with Session(engine) as session:
        ...                                    # e.g. the change that needs a restart
        sent = send_message(session, "restart")
        session.commit()
    if not sent.wait(timeout=10):              # True/False; never raises for a timeout
        print("the launcher did not restart the scheduler in time")
"""

from ._launcher._messages import Reply, Sent, send_message
from ._launcher._steps import Message

__all__ = ["Message", "Reply", "Sent", "send_message"]
