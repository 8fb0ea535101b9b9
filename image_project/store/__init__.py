"""The run store: every run's record, kept in a database and queryable.

Every run (success, failure, interrupt) is written in one transaction from its
:class:`~image_project.record.RunRecord` at the end of the run; the transcript file stays the
source of truth, and ``image-project runs import`` writes transcripts the store missed.
SQLAlchemy 2 Core serves SQLite (the default, a file beside the transcripts) and PostgreSQL
(``postgresql+psycopg://…``, for runs from several machines). The schema is versioned with
Alembic migrations shipped in this package and applied when a store is opened. See
``docs/store.md``.

This package is imported by every run that writes its record, so importing it stays light:
SQLAlchemy is imported when a run first writes the store (or a command reads it), Alembic
only when a store is created or migrated.

* :mod:`image_project.config.store_url` — the store URL, checked without SQLAlchemy (part of
  the configuration, which checks it when it loads);
* :mod:`.rows` — a RunRecord as table rows (pure data);
* :mod:`.schema` — the tables; :mod:`.db` — :class:`~image_project.store.db.RunStore`;
* :mod:`.writer` — what a run uses to write itself (and, with PostgreSQL, allocate ``seq``).

The ``image-project runs …`` and ``review`` commands over the store are
:mod:`image_project.cli.runs`.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from image_project.store.db import RunStore


def open_store(url: str) -> RunStore:
    """Open (creating or upgrading its schema if needed) the store at ``url``; use it as a
    context manager or call ``close()``. Readers use
    :meth:`~image_project.store.db.RunStore.records`."""
    from image_project.store.db import RunStore

    return RunStore.open(url)
