"""Alembic's environment for the run store, run by :func:`image_project.store.db.migrate`.

The store always hands Alembic an open connection (``config.attributes["connection"]``),
already inside the transaction that holds the migration lock, so there is no ``alembic.ini``
and no URL here.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
