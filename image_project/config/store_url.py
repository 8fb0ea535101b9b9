"""The store URL (``store.url``): checked without importing SQLAlchemy (the configuration is
loaded on every run, and the store's libraries are imported only when a run is written or a
``runs`` command runs). It lives in the configuration, which checks it at load time, and the
run store (:mod:`image_project.store`) reads the checked URL through it; the store is a layer
above the configuration, so the configuration does not import the store.

Two kinds of URL are accepted, one per engine the store supports:

* ``sqlite:///PATH`` (a file; a relative PATH is resolved against the project root; ``%XX``
  escapes are decoded, as in any URL, so a ``?``, ``#`` or ``%`` in a name is written
  ``%3F``, ``%23``, ``%25``);
* ``postgresql+psycopg://USER[:PASSWORD]@HOST[:PORT]/DBNAME`` (psycopg 3, the driver that
  ``pip install 'image-project[postgres]'`` installs; without it such a URL is an error naming
  that extra). ``postgresql://`` and ``postgres://`` (libpq's own schemes, what ``psql``
  takes) mean the same driver and are returned spelled ``postgresql+psycopg://``: SQLAlchemy
  would read a bare ``postgresql://`` as psycopg2, which the project does not install.
  Another driver (``postgresql+psycopg2://``, ``postgresql+asyncpg://``) is an error. Leave
  the password out and let libpq find it (``PGPASSWORD``, ``~/.pgpass``), so that no secret
  lives in a config file.

Without ``store.url`` the store is ``sqlite:///<image.log_path>/runs.sqlite``: beside the
transcripts it is built from.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, unquote

from image_project.extras import missing_extra

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIX = "postgresql+psycopg://"
LIBPQ_PREFIXES = ("postgresql://", "postgres://")
"""libpq's URL schemes, read as :data:`POSTGRES_PREFIX` (psycopg 3 is libpq's driver)."""
DEFAULT_SQLITE_NAME = "runs.sqlite"

_PASSWORD = re.compile(r"^(?P<head>[a-z0-9+]+://[^:/@]*):[^@/]*@")


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``; safe for messages and logs."""
    return _PASSWORD.sub(r"\g<head>:***@", url)


def import_command(url: str, *paths: str | Path, config: Path | None = None) -> str:
    """The shell command that imports ``paths`` into the store at ``url``: ``image-project
    runs import PATH... --store URL``, quoted for a POSIX shell. The URL is given always, so
    the command writes into this store whatever the configuration then says; its password,
    if any, is left out (libpq finds it in ``PGPASSWORD`` or ``~/.pgpass``). ``config``
    adds ``--config PATH``: the configuration whose folders a repair may touch."""
    import shlex

    bare = _PASSWORD.sub(r"\g<head>@", url)
    words = ["image-project", "runs", "import", *map(str, paths), "--store", bare]
    if config is not None:
        words += ["--config", str(config)]
    return " ".join(shlex.quote(word) for word in words)


def check_store_url(url: str, root: Path | None = None) -> str:
    """``url`` if it is a store URL this version can open, with a relative SQLite path made
    absolute against ``root`` and a libpq URL (:data:`LIBPQ_PREFIXES`) spelled
    ``postgresql+psycopg://``; else ValueError saying what is accepted (quoting the URL as
    given, its password hidden)."""
    shown = repr(redact_url(url))
    if url.startswith(SQLITE_PREFIX):
        path = url[len(SQLITE_PREFIX) :]
        if not path or path == ":memory:" or path.startswith("?"):
            raise ValueError(
                f"got {shown}: a SQLite store must be a file "
                "(sqlite:///PATH); a store in memory is lost when the run ends"
            )
        if root is not None and not Path(unquote(path)).is_absolute():
            return SQLITE_PREFIX + quote(str(root)) + "/" + path
        return url
    for scheme in (POSTGRES_PREFIX, *LIBPQ_PREFIXES):
        if url.startswith(scheme):
            return _check_postgres(url[len(scheme) :], shown)
    if url.startswith("postgresql+"):
        raise ValueError(
            f"got {shown}: use postgresql:// (or postgresql+psycopg://), the psycopg 3 driver "
            "(installed by image-project[postgres])"
        )
    raise ValueError(f"got {shown}, must be sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME")


def _check_postgres(rest: str, shown: str) -> str:
    """A PostgreSQL URL whose scheme was cut off (``rest``: ``USER@HOST/DBNAME...``), spelled
    with :data:`POSTGRES_PREFIX`."""
    if "/" not in rest or not rest.split("/", 1)[1].split("?", 1)[0]:
        raise ValueError(
            f"got {shown}: a PostgreSQL store URL names its database, "
            "like postgresql://user@host:5432/image_project"
        )
    missing = missing_extra("a PostgreSQL store", "psycopg")
    if missing is not None:
        raise ValueError(f"got {shown}: {missing}")
    return POSTGRES_PREFIX + rest


def default_store_url(log_path: Path) -> str:
    """The store used when ``store.url`` is null: a SQLite file in the transcripts' folder."""
    return SQLITE_PREFIX + quote(str(log_path / DEFAULT_SQLITE_NAME))


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL, read as SQLAlchemy reads it (the part before ``?``,
    ``%XX`` escapes decoded); None for any other engine."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    return Path(unquote(url[len(SQLITE_PREFIX) :].split("?", 1)[0]))
