"""The store has one writer: a run's rows reach a database through
:class:`~image_project.store.db.RunStore` (SQLAlchemy Core) and no other path.

Read from the source with ``ast`` (nothing is imported), every module of the package:

1. imports no SQLite driver (``sqlite3``, ``_sqlite3``; an import of any kind: top level,
   lazy, or for the type checker only): SQLite is opened by SQLAlchemy's dialect, in
   ``store/db.py``'s engine, so no module holds a connection of its own to a store file;
2. imports the store's tables (``image_project.store.schema``) only in ``store/db.py``, so
   a ``runs.insert()`` is built there alone;
3. takes ``insert``, ``Table`` or ``table`` from ``sqlalchemy`` (imported, or read as an
   attribute of the imported module, such as ``sa.table``) only in ``store/schema.py`` (the
   table definitions) and the Alembic migrations (which create them): no module builds an
   INSERT on a table of its own making;
4. writes an INSERT as SQL text (a string constant, or the literal part of an f-string,
   matching ``INSERT [OR …] INTO``, any case) only in the modules of :data:`RAW_INSERTS`,
   each for the one table it names there, none of them a store table: the campaign's own
   tables in PostgreSQL. The list is exact: a module that no longer writes one is taken off.

A module that wrote rows the way SQLAlchemy does, beside it (``sqlite3`` and ``INSERT INTO
"{table}"``), breaks rules 1 and 4; :func:`test_the_scan_finds_a_writer_beside_sqlalchemy`
shows the scan finds that shape.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import image_project
from tests.test_architecture import module_files

ROOT = Path(image_project.__file__).parent

DRIVERS = frozenset({"sqlite3", "_sqlite3"})
SCHEMA = "image_project.store.schema"
SCHEMA_READERS = frozenset({"image_project.store.db"})
TABLE_BUILDERS = frozenset({"insert", "Table", "table"})
TABLE_DEFINERS = ("image_project.store.schema", "image_project.store.migrations")
INSERT_SQL = re.compile(r"\bINSERT\s+(?:OR\s+\w+\s+)?INTO\b", re.IGNORECASE)

RAW_INSERTS: dict[str, str] = {
    "image_project.campaign.fence": "the campaign's claims table (CLAIMS_TABLE)",
    "image_project.campaign.limiter": "the campaign's shared rate windows (RATES_TABLE)",
}
"""Module -> the table its SQL text inserts into (not a store table)."""


def _imported(tree: ast.AST) -> list[tuple[str, int]]:
    """Every module an ``import`` or ``from … import`` names, with its line (``from a import
    b`` names ``a`` and ``a.b``)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _sqlalchemy_builders(tree: ast.AST) -> list[tuple[str, int]]:
    """``insert`` / ``Table`` / ``table`` taken from ``sqlalchemy``: imported by name, or read
    as an attribute of a name the module bound to ``sqlalchemy``."""
    aliases = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "sqlalchemy"
    }
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            found += [(a.name, node.lineno) for a in node.names if a.name in TABLE_BUILDERS]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in TABLE_BUILDERS
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append((node.attr, node.lineno))
    return found


def _insert_texts(tree: ast.AST) -> list[int]:
    """The lines of the string constants (f-strings' literal parts included) that are SQL
    INSERT statements."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and INSERT_SQL.search(node.value)
    ]


def _trees() -> dict[str, ast.Module]:
    return {
        name: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, path in module_files(ROOT).items()
    }


def findings(trees: dict[str, ast.Module]) -> list[str]:
    """Every break of rules 1-4 in ``trees`` (module name -> parsed source), one line each."""
    out: list[str] = []
    for name, tree in trees.items():
        for module, line in _imported(tree):
            if module.split(".")[0] in DRIVERS:
                out.append(f"{name}:{line}: imports the SQLite driver {module} (rule 1)")
            if module.startswith(SCHEMA) and name not in SCHEMA_READERS and name != SCHEMA:
                out.append(f"{name}:{line}: imports the store's tables (rule 2)")
        if not name.startswith(TABLE_DEFINERS):
            for builder, line in _sqlalchemy_builders(tree):
                out.append(f"{name}:{line}: takes sqlalchemy's {builder} (rule 3)")
        if name not in RAW_INSERTS:
            for line in _insert_texts(tree):
                out.append(f"{name}:{line}: writes an INSERT as SQL text (rule 4)")
    return list(dict.fromkeys(out))  # ``from a import b`` names a and a.b on one line


def test_the_package_writes_store_rows_through_sqlalchemy_only() -> None:
    assert findings(_trees()) == []


def test_every_module_listed_for_sql_inserts_still_writes_one() -> None:
    trees = _trees()
    assert {name for name in RAW_INSERTS if _insert_texts(trees[name])} == set(RAW_INSERTS)


def test_the_scan_finds_a_writer_beside_sqlalchemy() -> None:
    """The shape of a second writer: its own ``sqlite3`` connection and INSERTs as text, in
    any module of the package, or SQLAlchemy's ``insert`` on a table of its own making."""
    writer = ast.parse(
        "import sqlite3\n"
        "import sqlalchemy as sa\n"
        "from image_project.store.schema import ALL_TABLES\n"
        "def write(connection, table, names, marks, rows):\n"
        "    connection.executemany(f'INSERT INTO \"{table}\" ({names}) VALUES ({marks})', rows)\n"
        "    connection.execute(sa.insert(sa.table('runs')))\n"
    )
    found = findings({"image_project.store.fast_path": writer})
    assert [line.rpartition("(")[2] for line in found] == [
        "rule 1)",
        "rule 2)",
        "rule 3)",
        "rule 3)",
        "rule 4)",
    ], found
