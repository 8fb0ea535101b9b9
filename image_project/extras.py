"""The optional parts of the install, and the message a feature gives when its part is missing.

The base install (``pip install image-project``) holds what a run needs: ``python main.py``,
the run store on SQLite, ``runs list/show/export/import/stats``. Features only some users
need are named extras:

* ``postgres``: the psycopg driver, for a shared PostgreSQL run store (``store.url:
  postgresql+psycopg://...``);
* ``review``: Jinja2 and matplotlib, for ``image-project review`` (the static review site);
* ``all``: both.

A feature checks for its modules before it starts (:func:`missing_extra`, which finds a
module without importing it) and says which extra to install, instead of a bare
``ModuleNotFoundError`` halfway through.
"""

from __future__ import annotations

import importlib.util

EXTRA_OF: dict[str, str] = {"psycopg": "postgres", "jinja2": "review", "matplotlib": "review"}
"""Module -> the extra that installs it."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that cannot be imported; a module without spec
        return False


def missing_extra(feature: str, *modules: str) -> str | None:
    """None when every module of ``modules`` can be imported; else the message naming the
    first missing one and the extra that installs it (``feature`` is what needs it, as the
    start of a sentence: "the review site")."""
    for module in modules:
        if not _installed(module):
            extra = EXTRA_OF[module]
            return (
                f"{feature} needs {module}, which the base install leaves out: "
                f"pip install 'image-project[{extra}]'"
            )
    return None
