"""Libraries are used through their public API: no ``.py`` file of the package, the tests,
``bench/`` or ``scripts/`` imports a private module of a library (``openai._legacy_response``,
``from openai._utils import ...``, ``from openai import _models``), so that an upstream
release that reshapes its internals cannot break us unannounced.

Read from the source with ``ast`` (nothing is imported); a name starting with ``_`` anywhere
below the library's top-level package is private.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("image_project", "tests", "bench", "scripts")
LIBRARIES = frozenset({"openai", "sqlalchemy", "alembic", "procrastinate", "pyrate_limiter"})
"""The libraries the project reaches deepest into (the SDK, the store, the campaign queue and
limiter)."""


def python_files(root: Path = ROOT, folders: Iterable[str] = FOLDERS) -> list[Path]:
    return sorted(p for folder in folders for p in (root / folder).rglob("*.py"))


def _imported(node: ast.AST) -> Iterator[str]:
    """The dotted names an import statement brings in (``from a import b`` gives ``a.b``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        yield node.module
        yield from (f"{node.module}.{alias.name}" for alias in node.names)


def private_imports(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    """``path:line: name`` for every import statement that reaches a private part of one of
    :data:`LIBRARIES` (its first such name)."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            name = next((n for n in _imported(node) if _private(n)), None)
            if name is not None:
                where = path.relative_to(root).as_posix()
                found.append(f"{where}:{getattr(node, 'lineno', 0)}: {name}")
    return found


def _private(name: str) -> bool:
    top, *rest = name.split(".")
    return top in LIBRARIES and any(part.startswith("_") for part in rest)


def test_no_file_imports_a_private_module_of_a_library() -> None:
    files = python_files()
    assert len(files) > 100  # the folders were found
    assert private_imports(files) == []


def test_the_check_sees_each_spelling_of_a_private_import(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "planted.py").write_text(
        "import openai\n"
        "import openai.types.chat\n"
        "from openai.types import ImagesResponse\n"
        "from image_project import _fake_openai\n"
        "import openai._legacy_response\n"
        "from openai._utils import maybe_transform\n"
        "from openai import _models\n"
        "def later():\n"
        "    from sqlalchemy.engine._row import x\n",
        encoding="utf-8",
    )
    found = private_imports(python_files(tmp_path), root=tmp_path)
    assert found == [
        "tests/planted.py:5: openai._legacy_response",
        "tests/planted.py:6: openai._utils",
        "tests/planted.py:7: openai._models",
        "tests/planted.py:9: sqlalchemy.engine._row",
    ]
