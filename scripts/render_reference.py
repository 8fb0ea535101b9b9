"""Render the reference blocks of README.md and docs/*.md from the code.

What the docs show of the code's own words is never typed by hand: the configuration keys
(every key, what it allows, its default and what it does, from the config models:
:func:`image_project.config.reference.config_reference`) and the judges' instructions, the
built-in rubric texts and the judge's answer schema (from
``image_project.stages.scoring``). Each stands in a block between two markers,
``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->``, written from what :data:`BLOCKS`
names::

    python scripts/render_reference.py --write  # rewrite every block in place
    python scripts/render_reference.py --check  # exit 1 naming each block that differs

``tests/test_reference.py`` runs the check in the full suite (and the fast one): a block that
no longer matches the code fails it. After changing a model, a docstring under a field, a
rubric or an instruction, run ``--write`` and commit both.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

__all__ = ["BLOCKS", "MARKER", "documents", "main", "render", "render_text", "stale_blocks"]

MARKER = re.compile(
    r"(<!-- generated:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)",
    re.DOTALL,
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(prefix: str, *, exclude: str | None = None, relative: bool = False) -> str:
    """The keys under ``prefix`` (all keys for ``""``) as one Markdown table; ``relative``
    writes them without ``prefix.``."""
    from image_project.config.reference import config_reference

    rows = [
        r
        for r in config_reference(prefix)
        if exclude is None or not (r.key == exclude or r.key.startswith(f"{exclude}."))
    ]
    lines = ["| key | allowed | default | what it does |", "| --- | --- | --- | --- |"]
    for r in rows:
        key = r.key[len(prefix) + 1 :] if relative and prefix else r.key
        lines.append(
            f"| `{key}` | {_cell(r.allowed)} | `{_cell(r.default)}` | {_cell(r.description)} |"
        )
    return "\n".join(lines) + "\n"


def _whole_reference() -> str:
    from image_project.config.models import _INTERNAL_FIELDS, AppConfig

    parts = []
    for name in AppConfig.model_fields:
        if name in _INTERNAL_FIELDS:
            continue
        parts.append(f"**`{name}`**\n\n{_table(name)}")
    return "\n".join(parts)


def _fenced(text: str, lang: str = "") -> str:
    return f"```{lang}\n{text}\n```\n"


def _judge_prompt(rubric: str) -> Callable[[], str]:
    def render() -> str:
        from image_project.config.models import RubricSpec
        from image_project.stages.scoring.rubrics import judge_system_prompt

        return _fenced(judge_system_prompt(RubricSpec(name=rubric)))

    return render


def _rubric(name: str) -> Callable[[], str]:
    def render() -> str:
        from image_project.stages.scoring.rubrics import BUILTIN_RUBRIC_TEXTS

        text = BUILTIN_RUBRIC_TEXTS[name]
        assert text is not None, name
        return _fenced(text)

    return render


def _judge_schema() -> str:
    from image_project.stages.scoring.judges import judge_output

    schema = judge_output(("A", "B")).schema
    assert schema is not None
    return _fenced(json.dumps(schema.schema, sort_keys=True), "json")


BLOCKS: dict[str, Callable[[], str]] = {
    "config-reference": _whole_reference,
    "config-scoring": lambda: _table(
        "prompt.scoring", exclude="prompt.scoring.evolution", relative=True
    ),
    "config-evolution": lambda: _table("prompt.scoring.evolution", relative=True),
    "config-context": lambda: _table("context"),
    "config-upscale": lambda: _table("upscale"),
    "judge-prompt-default": _judge_prompt("default"),
    "judge-prompt-strict": _judge_prompt("strict"),
    "rubric-novelty-heavy": _rubric("novelty_heavy"),
    "rubric-profile-fit": _rubric("profile_fit"),
    "judge-schema": _judge_schema,
}
"""Block name -> the function that renders its body from the code."""


def render(name: str) -> str:
    """The body of block ``name``, rendered from the code."""
    if name not in BLOCKS:
        raise KeyError(f"unknown generated block {name!r}; known: {', '.join(sorted(BLOCKS))}")
    return BLOCKS[name]()


def render_text(text: str) -> str:
    """``text`` with every generated block rendered anew."""
    return MARKER.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def documents(root: Path = REPO) -> list[Path]:
    """The Markdown files that may hold generated blocks: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def stale_blocks(paths: Iterable[Path], root: Path = REPO) -> list[str]:
    """``file: block`` for every block whose text differs from what the code renders."""
    out = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for m in MARKER.finditer(text):
            if m.group("body") != render(m.group("name")):
                out.append(f"{path.relative_to(root).as_posix()}: {m.group('name')}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite every block in place")
    mode.add_argument("--check", action="store_true", help="only report stale blocks (the default)")
    args = parser.parse_args(argv)
    paths = documents()
    if not args.write:
        stale = stale_blocks(paths)
        for item in stale:
            print(f"stale reference: {item} (run python scripts/render_reference.py --write)")
        return 1 if stale else 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new = render_text(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rendered: {path.relative_to(REPO).as_posix()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
