"""Every module of ``image_project`` imports, and its ``__all__`` names exactly what it exports.

Which modules: ``pkgutil.walk_packages`` over the package, plus ``image_project`` itself. All
of them are imported (``__main__`` too: it runs nothing on import). A module is *public* when
no part of its dotted name starts with an underscore (so ``image_project.__main__`` is not);
each public module must satisfy:

1. ``__all__`` exists and is a list or tuple of strings;
2. every name in ``__all__`` is an attribute of the module;
3. no name is listed twice;
4. every public name the module *defines itself* is in ``__all__``.

"Defines itself" is decided from the module's own source with ``ast``: the names bound by its
top-level statements — ``def``, ``async def``, ``class``, and assignments with a value (``=``,
annotated ``x: T = ...``, augmented ``+=``; every name in a tuple or list target) — looking
into the bodies of top-level ``if`` / ``try`` / ``with`` statements but never into a function
or class body. Imports (``import``, ``from ... import``) bind nothing that counts. Public means
the name does not start with an underscore. Three kinds of bound name are then left out,
checked on the runtime object:

* a function or class whose ``__module__`` is another module: an imported object re-bound by
  assignment (``Alias = other.Thing``) is a re-export, which ``__all__`` may list but need not;
* type variables (``typing.TypeVar``, ``ParamSpec``, ``TypeVarTuple``): typing machinery for
  the module's own signatures, not something to import;
* ``logging.Logger`` objects: a module's logger is found by name through
  ``logging.getLogger``, and a star import must not spread it.

A package's ``__init__`` re-exports. For a public package the same four checks apply, and
in addition every public name its ``__init__`` imports from one of the package's own
submodules (``from .x import a`` or ``from image_project.pkg.x import a``) must be in
``__all__``, so nothing the package gathers is left out of its export list.
"""

from __future__ import annotations

import ast
import importlib
import logging
import pkgutil
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

import image_project

# Type variables and loggers: bound in the module, never exports (see the docstring).
_NOT_EXPORTS = (typing.TypeVar, typing.ParamSpec, typing.TypeVarTuple, logging.Logger)


def _module_names() -> list[str]:
    def fail(name: str) -> None:  # called while the import error is being handled
        raise ImportError(f"cannot import {name} while walking image_project") from (
            sys.exc_info()[1]
        )

    walked = pkgutil.walk_packages(image_project.__path__, "image_project.", onerror=fail)
    return ["image_project", *sorted(info.name for info in walked)]


MODULES = _module_names()
PUBLIC = [name for name in MODULES if not any(p.startswith("_") for p in name.split("."))]


def _bound_names(body: list[ast.stmt]) -> Iterator[str]:
    """Names bound by these top-level statements (see the module docstring)."""
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield stmt.name
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                yield from _target_names(target)
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign) and stmt.value is not None:
            yield from _target_names(stmt.target)
        elif isinstance(stmt, ast.If):
            yield from _bound_names(stmt.body)
            yield from _bound_names(stmt.orelse)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from _bound_names(block)
            for handler in stmt.handlers:
                yield from _bound_names(handler.body)
        elif isinstance(stmt, ast.With):
            yield from _bound_names(stmt.body)
        elif type(stmt).__name__ == "TypeAlias":  # `type X = ...`, Python 3.12+
            yield stmt.name.id  # type: ignore[attr-defined]


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)
    # attribute and subscript targets (x.y = ..., x[0] = ...) bind no module name


def defined_here(module: types.ModuleType, tree: ast.Module) -> list[str]:
    """The public names ``module`` defines itself, in source order."""
    names = []
    for name in dict.fromkeys(_bound_names(tree.body)):
        if name.startswith("_") or not hasattr(module, name):
            continue
        obj = getattr(module, name)
        if isinstance(obj, type | types.FunctionType) and obj.__module__ != module.__name__:
            continue  # an imported function or class re-bound by assignment
        if isinstance(obj, _NOT_EXPORTS):
            continue
        names.append(name)
    return names


def imported_from_own_submodules(package: str, tree: ast.Module) -> list[str]:
    """Public names a package's ``__init__`` imports from its own submodules."""
    names = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.ImportFrom):
            continue
        if stmt.level == 0 and not (stmt.module or "").startswith(package + "."):
            continue
        names += [
            a.asname or a.name for a in stmt.names if not (a.asname or a.name).startswith("_")
        ]
    return names


def problems(module: types.ModuleType, source: str) -> list[str]:
    """What is wrong with ``module``'s ``__all__`` (empty when nothing is)."""
    exported = getattr(module, "__all__", None)
    if not isinstance(exported, list | tuple) or not all(isinstance(n, str) for n in exported):
        return [f"__all__ is missing or not a list of strings: {exported!r}"]
    found = []
    found += [f"listed but not defined: {n}" for n in exported if not hasattr(module, n)]
    found += [f"listed twice: {n}" for n in dict.fromkeys(exported) if exported.count(n) > 1]
    tree = ast.parse(source)
    found += [
        f"defined but not in __all__: {n}" for n in defined_here(module, tree) if n not in exported
    ]
    if hasattr(module, "__path__"):  # a package: what it gathers from its submodules
        found += [
            f"imported from a submodule but not in __all__: {n}"
            for n in imported_from_own_submodules(module.__name__, tree)
            if n not in exported
        ]
    return found


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name: str) -> None:
    assert importlib.import_module(name).__name__ == name


@pytest.mark.parametrize("name", PUBLIC)
def test_all_names_exactly_what_the_module_exports(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    found = problems(module, Path(module.__file__).read_text(encoding="utf-8"))
    assert not found, f"{name}: " + "; ".join(found)


def test_the_walk_finds_the_packages_and_modules() -> None:
    assert {"image_project", "image_project.cli", "image_project.engine.nodes"} <= set(PUBLIC)
    assert "image_project.stages.scoring.flow" in PUBLIC
    assert "image_project.__main__" in MODULES and "image_project.__main__" not in PUBLIC


def _fake_module(name: str, source: str, *, package: bool = False) -> types.ModuleType:
    module = types.ModuleType(name)
    if package:
        module.__path__ = []
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def test_the_check_catches_each_kind_of_mistake() -> None:
    source = textwrap.dedent(
        """
        import logging
        from typing import TypeVar
        from pathlib import Path

        __all__ = ["listed", "listed", "ghost", "Path"]

        T = TypeVar("T")
        logger = logging.getLogger("x")
        Alias = Path
        LIMIT, OTHER = 1, 2
        _private = 3

        def listed() -> None: ...
        class Missing: ...
        if True:
            BRANCH: int = 4
        try:
            TRIED = 5
        except ImportError:
            pass
        """
    )
    assert problems(_fake_module("fake.mod", source), source) == [
        "listed but not defined: ghost",
        "listed twice: listed",
        "defined but not in __all__: LIMIT",
        "defined but not in __all__: OTHER",
        "defined but not in __all__: Missing",
        "defined but not in __all__: BRANCH",
        "defined but not in __all__: TRIED",
    ]
    assert problems(_fake_module("fake.none", "X = 1"), "X = 1") == [
        "__all__ is missing or not a list of strings: None"
    ]


def test_the_check_catches_a_package_leaving_out_a_submodule_name() -> None:
    source = textwrap.dedent(
        """
        from json import dumps
        from image_project.seeding import derive_seed, rng_for
        from image_project.seeding import MAX_SEED as _MAX

        __all__ = ["derive_seed"]
        """
    )
    package = _fake_module("image_project", source, package=True)
    assert problems(package, source) == [
        "imported from a submodule but not in __all__: rng_for",
    ]
