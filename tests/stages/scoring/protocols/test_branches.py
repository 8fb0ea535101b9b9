"""No code outside ``image_project/stages/scoring/protocols/`` branches on a judging
protocol's name: what a protocol does is in its own value (docs/judging.md, "Adding a
protocol"), so a new protocol never needs a branch elsewhere.

Read from the source with ``ast`` (nothing imported). A *branch* is a comparison (``==``,
``!=``, ``in``, ``not in``, ``is``) of something about a protocol (its source mentions
``protocol``, or it is assigned to a name that does) with a protocol name (a string the
configuration accepts as one, ``DEFAULT_PROTOCOL``, a protocol module's ``PROTOCOL``, or a
tuple, list or set of them); a ``match`` on a protocol with a protocol name as a case; or a
dict keyed by two or more protocol names (a dispatch table). The one comparison allowed is
:func:`image_project.record.scoring.named_protocol`, the record's rule for naming the
default protocol.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import image_project
from image_project.config.models import JudgeProtocol

PACKAGE = Path(image_project.__file__).parent
PROTOCOLS_DIR = PACKAGE / "stages" / "scoring" / "protocols"
NAMES = frozenset(get_args(JudgeProtocol))
ALLOWED = {("record/scoring.py", "named_protocol")}
"""(file under the package, function) pairs whose comparisons are allowed."""


def _is_name(node: ast.expr) -> bool:
    """Whether ``node`` is a protocol name, or a container of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in NAMES
    if isinstance(node, ast.Name):
        return node.id == "DEFAULT_PROTOCOL" or node.id.endswith("PROTOCOL")
    if isinstance(node, ast.Attribute):
        return node.attr in ("DEFAULT_PROTOCOL", "PROTOCOL")
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_name(e) for e in node.elts)
    return False


def _about_protocol(node: ast.AST) -> bool:
    """Whether a name or attribute in ``node`` mentions a protocol."""
    return any(
        "protocol" in (n.id if isinstance(n, ast.Name) else n.attr).lower()
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    )


class _Scan(ast.NodeVisitor):
    def __init__(self, where: str) -> None:
        self.where = where
        self.found: list[tuple[int, str]] = []
        self.function = ""
        self.assigned = False
        """Whether the statement being read assigns to a name that mentions a protocol."""

    def _add(self, node: ast.AST) -> None:
        if (self.where, self.function) in ALLOWED:
            return
        self.found.append((getattr(node, "lineno", 0), ast.unparse(node)))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def _assigned(self, targets: list[ast.expr], node: ast.stmt) -> None:
        outer, self.assigned = self.assigned, any(_about_protocol(t) for t in targets)
        self.generic_visit(node)
        self.assigned = outer

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node.targets, node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned([node.target], node)

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        named = [o for o in operands if _is_name(o)]
        others = [o for o in operands if not _is_name(o)]
        if named and others and (self.assigned or any(_about_protocol(o) for o in others)):
            self._add(node)
        self.generic_visit(node)

    def visit_Match(self, node: ast.Match) -> None:
        if _about_protocol(node.subject):
            for case in node.cases:
                values = [p.value for p in ast.walk(case.pattern) if isinstance(p, ast.MatchValue)]
                if any(_is_name(v) for v in values):
                    self._add(case.pattern)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if sum(1 for k in node.keys if k is not None and _is_name(k)) >= 2:
            self._add(node)
        self.generic_visit(node)


def branches(source: str, where: str = "<snippet>") -> list[tuple[int, str]]:
    """The protocol branches in ``source`` (line, the code), as defined in the module
    docstring."""
    scan = _Scan(where)
    scan.visit(ast.parse(source))
    return scan.found


def package_branches(root: Path = PACKAGE) -> Iterator[str]:
    """``path:line: code`` of every protocol branch in the package's modules outside the
    protocols' own package."""
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(PROTOCOLS_DIR):
            continue
        where = path.relative_to(root).as_posix()
        for line, code in branches(path.read_text(encoding="utf-8"), where):
            yield f"image_project/{where}:{line}: {code}"


def test_no_module_outside_the_protocols_branches_on_a_protocol_name() -> None:
    found = list(package_branches())
    assert not found, (
        "code outside image_project/stages/scoring/protocols/ branches on a judging "
        "protocol; put what the protocol does in its value instead:\n" + "\n".join(found)
    )


def test_the_scan_finds_every_kind_of_branch_and_nothing_else() -> None:
    planted = """
if judge.protocol == "pairwise":
    pass
gate = judge.protocol != "logprobs"
many = protocol in ("list", "pointwise")
same = p.protocol is pairwise.PROTOCOL
short = j.protocol != DEFAULT_PROTOCOL
protocol: str = Field(default="list", exclude_if=lambda v: v == "list")
table = {"list": a, "reasoned": b}
match judge.protocol:
    case "reasoned":
        pass
"""
    found = branches(planted)
    assert [line for line, _ in found] == [2, 4, 5, 6, 7, 8, 9, 11], found
    unrelated = """
if action == "list":
    pass
kind = {"object": "list"}
body = {"logprobs": None, "top_logprobs": 5}
protocol = protocol_of(judge.protocol).name
"""
    assert branches(unrelated) == []
