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
  that extra). Leave the password out and let libpq find it (``PGPASSWORD``,
  ``~/.pgpass``), so that no secret lives in a config file.

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
    absolute against ``root``; else ValueError saying what is accepted (the password
    hidden)."""
    if url.startswith(SQLITE_PREFIX):
        path = url[len(SQLITE_PREFIX) :]
        if not path or path == ":memory:" or path.startswith("?"):
            raise ValueError(
                f"got {redact_url(url)!r}: a SQLite store must be a file "
                "(sqlite:///PATH); a store in memory is lost when the run ends"
            )
        if root is not None and not Path(unquote(path)).is_absolute():
            return SQLITE_PREFIX + quote(str(root)) + "/" + path
        return url
    if url.startswith(POSTGRES_PREFIX):
        rest = url[len(POSTGRES_PREFIX) :]
        if "/" not in rest or not rest.split("/", 1)[1].split("?", 1)[0]:
            raise ValueError(
                f"got {redact_url(url)!r}: a PostgreSQL store URL names its database, "
                "like postgresql+psycopg://user@host:5432/image_project"
            )
        missing = missing_extra("a PostgreSQL store", "psycopg")
        if missing is not None:
            raise ValueError(f"got {redact_url(url)!r}: {missing}")
        return url
    if url.startswith(("postgresql://", "postgres://", "postgresql+")):
        raise ValueError(
            f"got {redact_url(url)!r}: use postgresql+psycopg://, the psycopg 3 driver "
            "(installed by image-project[postgres])"
        )
    raise ValueError(
        f"got {redact_url(url)!r}, must be sqlite:///PATH or "
        "postgresql+psycopg://USER@HOST:PORT/DBNAME"
    )


def default_store_url(log_path: Path) -> str:
    """The store used when ``store.url`` is null: a SQLite file in the transcripts' folder."""
    return SQLITE_PREFIX + quote(str(log_path / DEFAULT_SQLITE_NAME))


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL, read as SQLAlchemy reads it (the part before ``?``,
    ``%XX`` escapes decoded); None for any other engine."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    return Path(unquote(url[len(SQLITE_PREFIX) :].split("?", 1)[0]))
