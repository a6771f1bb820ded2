"""The application's side of the engine's behavioural suite: inserting, reading and moving
rows with the ORM of the Stator at hand (SQLAlchemy's session, or Django's ORM on the
Stator's database alias), so one test body runs on every integration."""

import threading

from django.db import connections
from django.db.models import Model as DjangoModel
from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session

from stator._store._django import DjangoStore


def alias_of(stator):
    """The Django database alias of a Stator on the Django store, else None."""
    return stator.store.alias if isinstance(stator.store, DjangoStore) else None


def load(stator, model, pk):
    """The row as the database has it now (None if deleted), detached."""
    if alias := alias_of(stator):
        return model.objects.using(alias).filter(pk=pk).first()
    with Session(stator.engine) as session:
        return session.get(model, pk)


def add(stator, *objects):
    if alias := alias_of(stator):
        for obj in objects:
            obj.save(using=alias)
        return
    with Session(stator.engine) as session:
        session.add_all(objects)
        session.commit()


def add_many(stator, model, rows):
    """Insert ``rows`` (dicts of values) in one bulk statement, past the ORM's objects."""
    if alias := alias_of(stator):
        model.objects.using(alias).bulk_create([model(**row) for row in rows])
        return
    with stator.engine.begin() as conn:
        conn.execute(insert(model), rows)


def run_sql(stator, sql):
    """Run a statement as the application's own SQL would, outside any ORM."""
    if alias := alias_of(stator):
        with connections[alias].cursor() as cursor:
            cursor.execute(sql)
        return
    with stator.engine.begin() as conn:
        conn.execute(text(sql))


def move(stator, model, pk, to):
    """The application moves a row (``transition_perform``); returns the moved instance."""
    if alias := alias_of(stator):
        obj = model.objects.using(alias).get(pk=pk)
        obj.transition_perform(to, clock=stator.clock)
        return obj
    with Session(stator.engine, expire_on_commit=False) as session:
        obj = session.get(model, pk)
        obj.transition_perform(to, clock=stator.clock)
        session.commit()
        session.refresh(obj)
        return obj


def move_elsewhere(stator, model, pk, to):
    """``move``, from a connection other than a running handler's (Django's is per thread)."""
    if alias := alias_of(stator):

        def mover():
            try:
                move(stator, model, pk, to)
            finally:
                connections[alias].close()

        thread = threading.Thread(target=mover)
        thread.start()
        thread.join()
        return
    move(stator, model, pk, to)


def move_many(stator, model, to, pks=None):
    """The application moves every row (or those of ``pks``) that may move to ``to``."""
    if alias := alias_of(stator):
        rows = model.objects.using(alias)
        rows = rows if pks is None else rows.filter(pk__in=pks)
        return rows.transition_perform(to, clock=stator.clock)
    return stator.transition_many(model, to, *([] if pks is None else [model.id.in_(pks)]))


def write_in_handler(row, *new):
    """What a handler writes, in its transaction: ``row``'s changed fields and ``new`` rows."""
    if isinstance(row, DjangoModel):
        row.save()
        for obj in new:
            obj.save(using=row._state.db)
        return
    session = Session.object_session(row)
    session.add_all(new)
    session.flush()


def create_table(stator, model):
    if alias := alias_of(stator):
        with connections[alias].schema_editor() as editor:
            editor.create_model(model)
        return
    model.__table__.create(stator.engine)


def texts(stator, model):
    """The ``text`` column of every row of ``model``."""
    if alias := alias_of(stator):
        return list(model.objects.using(alias).values_list("text", flat=True))
    with Session(stator.engine) as session:
        return session.scalars(select(model.text)).all()


def due_in(stator, model, pk) -> float:
    """Seconds from the clock's now until the row is next due."""
    row = load(stator, model, pk)
    return (row.state_next - stator.clock.now()).total_seconds()


def errors(stator):
    return stator.status()["errors"]


def states_of(stator):
    """{state: status entry} for the only model."""
    (model,) = stator.status()["models"]
    return {entry["state"]: entry for entry in model["states"]}
