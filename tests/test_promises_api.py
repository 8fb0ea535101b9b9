"""docs/api.md's error tree: ``image_project.errors``' docstring draws ``ImageProjectError``
and every error the package root exports under it, each under its real base class."""

from __future__ import annotations

import re

import image_project
import image_project.errors

_ROOT = re.compile(r"^    (?P<name>[A-Z]\w*)\s")
_CHILD = re.compile(r"^    (?P<indent>(?:[│ ]   )*)[├└]── (?P<name>[A-Z]\w*)")


def drawn_tree(doc: str) -> dict[str, str | None]:
    """``{class name: the name drawn above it}`` from a ``├──`` / ``└──`` drawing indented
    by four (the root maps to None). A name's depth is its column: four per level."""
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in doc.splitlines():
        if not stack:
            if root := _ROOT.match(line):
                parents[root.group("name")] = None
                stack.append(root.group("name"))
            continue
        if child := _CHILD.match(line):
            del stack[len(child.group("indent")) // 4 + 1 :]
            parents[child.group("name")] = stack[-1]
            stack.append(child.group("name"))
    return parents


def exported_errors() -> dict[str, type[BaseException]]:
    return {
        name: value
        for name in image_project.__all__
        if isinstance(value := getattr(image_project, name), type)
        and issubclass(value, image_project.ImageProjectError)
    }


def test_the_errors_docstring_draws_every_exported_error_under_its_base() -> None:
    assert image_project.errors.__doc__ is not None
    tree = drawn_tree(image_project.errors.__doc__)
    exported = exported_errors()
    assert sorted(tree) == sorted(exported), "drawn, not exported / exported, not drawn"
    for name, cls in exported.items():
        base = cls.__bases__[0].__name__
        assert tree[name] == (None if name == "ImageProjectError" else base), name


def test_the_tree_reader_sees_depth_and_siblings() -> None:
    """Control: the reader gets a nested drawing right (else the test above proves little)."""
    doc = (
        "x\n\n    Root                 base\n    ├── A                a\n"
        "    │   └── B            b, under A\n    │                    more text\n"
        "    └── C                c\n"
    )
    assert drawn_tree(doc) == {"Root": None, "A": "Root", "B": "A", "C": "Root"}
