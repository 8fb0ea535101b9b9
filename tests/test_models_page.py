"""docs/models.md's tables are the capability tables of the code (every model of
``TEXT_MODELS`` and ``IMAGE_MODELS`` in one row, with its shutdown date, structured outputs
and seed, and nothing else), and the offline backend is not held to them."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from image_project.cli import command as cli
from image_project.config.capabilities import IMAGE_MODELS, TEXT_MODELS
from image_project.engine.output import JsonOutput

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "models.md"


def table(heading: str) -> list[list[str]]:
    """The rows (cells) of the first table under ``## heading``."""
    text = PAGE.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1]
    rows = [line for line in text.split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def shutdown(cell: str) -> date | None:
    found = re.match(r"(\d{4}-\d{2}-\d{2})", cell)
    return date.fromisoformat(found.group(1)) if found else None


def yes_no(cell: str) -> bool | None:
    return {"yes": True, "not known": None}.get(cell, False)


def test_the_text_table_is_the_codes() -> None:
    rows = table("Text models")
    listed = [name for row in rows for name in names(row[0])]
    assert sorted(listed) == sorted(TEXT_MODELS)
    for row in rows:
        for name in names(row[0]):
            entry = TEXT_MODELS[name]
            assert shutdown(row[4]) == entry.shutdown, name
            assert (yes_no(row[2]), yes_no(row[3])) == (entry.structured_outputs, entry.seed), name
            temperature = row[1]
            if entry.temperature == "reasoning_none":
                assert temperature.startswith("with `reasoning_effort: none`"), name
            elif entry.temperature == "default_only" and not name.startswith("o"):
                assert temperature.startswith("default only"), name
            elif entry.temperature == "any":
                assert temperature.startswith("any"), name


def test_the_image_table_is_the_codes() -> None:
    rows = table("Image models")
    listed = [name for row in rows for name in names(row[0])]
    assert sorted(listed) == sorted(IMAGE_MODELS)
    for row in rows:
        for name in names(row[0]):
            assert shutdown(row[3]) == IMAGE_MODELS[name].shutdown, name


def test_the_offline_backend_draws_a_size_the_api_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = [
        f"image.generation_path={tmp_path / 'images'}",
        f"image.log_path={tmp_path / 'logs'}",
        f"prompt.generations_path={tmp_path / 'generations.csv'}",
        "image.size=96x288",
        "store.enabled=false",
    ]
    argv = [item for s in sets for item in ("--set", s)]
    assert cli.main(["--offline", *argv], env={}, root=REPO) == 0
    (image,) = (tmp_path / "images").glob("*_image.jpg")
    with Image.open(image) as drawn:
        assert drawn.width == 96
    capsys.readouterr()
    with_key = {"OPENAI_API_KEY": "sk-example"}
    assert cli.main(["--set", "backend.provider=openai", *argv], env=with_key, root=REPO) == 2
    assert "image.size: got '96x288'" in capsys.readouterr().err


def _strings(node: object, path: str = "") -> dict[str, dict[str, object]]:
    """Every string node of a JSON schema by its path (``[]`` for an array's items)."""
    if not isinstance(node, dict):
        return {}
    found = {path: node} if node.get("type") == "string" else {}
    for key, sub in node.get("properties", {}).items():
        found |= _strings(sub, f"{path}.{key}")
    return found | _strings(node.get("items"), f"{path}[]")


BOUNDS = {
    "card": {".hook": 600, ".narrative": 600, ".avoid[]": 200}
    | {f".options.{o}[]": 200 for o in ("composition", "palette", "medium", "mood")},
    "rewrite": {".concepts[]": 2000},
    "selector": {".selections[].reason": 400, ".summary": 600},
    "hints": {".adjectives[]": 120, ".avoid[]": 120},
}
"""docs/models.md "Schema dialects": the length of every free string of an answer."""


def test_every_free_string_has_the_bounds_the_page_states_and_ids_are_enums() -> None:
    from image_project.stages.scoring.cards import CARD_OUTPUT
    from image_project.stages.scoring.evolution import selector_output
    from image_project.stages.scoring.hints import hints_output
    from image_project.stages.scoring.judges import judge_output
    from image_project.stages.standard import concept_rewrite_output

    ids = ["A", "B", "C"]
    outputs: dict[str, JsonOutput[Any]] = {
        "card": CARD_OUTPUT,
        "rewrite": concept_rewrite_output(3),
        "selector": selector_output(ids, ("performance", "diversity")),
        "hints": hints_output(["a lantern at dusk"]),
        "judge": judge_output(ids),
    }
    for name, output in outputs.items():
        grammar = output.schema.grammar
        assert grammar is not None and "pattern" not in str(grammar), name
        strings = _strings(grammar)
        free = {p: n for p, n in strings.items() if "enum" not in n}
        assert {p: (n.get("minLength"), n.get("maxLength")) for p, n in free.items()} == {
            p: (1, most) for p, most in BOUNDS.get(name, {}).items()
        }, name
    selector = _strings(outputs["selector"].schema.grammar)
    assert "enum" in selector[".selections[].id"] and "enum" in selector[".selections[].category"]
