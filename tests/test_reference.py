"""The reference blocks of README.md and docs/ are what the code says (scripts/render_reference.py).

The configuration tables are read from the config models, the judges' instructions, the
built-in rubric texts and the judge's answer schema from ``image_project.stages.scoring``;
these tests fail when a block differs from what the code renders now (a table edited by
hand, or a model changed without ``--write``), when a key has no description, and when the
reference and ``config/config.yaml`` disagree on which keys exist.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from image_project.config.models import ScoringConfig
from image_project.config.reference import config_reference
from image_project.stages.scoring import rubrics

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import render_reference  # noqa: E402


def test_readme_and_docs_reference_blocks_match_the_code() -> None:
    stale = render_reference.stale_blocks(render_reference.documents())
    assert stale == [], f"run python scripts/render_reference.py --write: {stale}"


def test_every_reference_block_stands_in_the_readme_or_the_docs() -> None:
    names: set[str] = set()
    for path in render_reference.documents():
        text = path.read_text(encoding="utf-8")
        names |= {m.group("name") for m in render_reference.MARKER.finditer(text)}
    assert set(render_reference.BLOCKS) <= names, set(render_reference.BLOCKS) - names


def test_every_key_has_a_description() -> None:
    missing = [r.key for r in config_reference() if not r.description]
    assert missing == [], f"write a docstring under each field in its model: {missing}"


def _yaml_keys(data: Any, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, value in data.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and value and name not in ("plugin_settings",):
            keys |= _yaml_keys(value, f"{key}.")
        else:
            keys.add(key)
    return keys


def test_the_reference_has_exactly_the_keys_of_config_yaml() -> None:
    """Every key ``config/config.yaml`` documents is in the reference, and every key of the
    reference is in config.yaml (the items of a list, ``judges[i].*``, apart)."""
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    documented = _yaml_keys(raw)
    generated = {r.key for r in config_reference() if "[i]" not in r.key}
    assert documented == generated, documented ^ generated


def test_a_default_changed_in_a_model_makes_its_tables_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: the check sees a model whose default no longer matches the docs (the
    drift of a hand-typed table that said ``normalise: none``)."""
    monkeypatch.setattr(ScoringConfig.model_fields["normalise"], "default", "none")
    stale = render_reference.stale_blocks(render_reference.documents())
    assert "docs/scoring.md: config-scoring" in stale
    assert "docs/configuration.md: config-reference" in stale
    assert "| `normalise` | one of 'none', 'ranks', 'zscores', 'robust' | `none` |" in (
        render_reference.render("config-scoring")
    )


def test_a_rubric_changed_in_the_code_makes_its_block_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = rubrics.BUILTIN_RUBRIC_TEXTS
    assert isinstance(texts, dict)
    monkeypatch.setitem(texts, "profile_fit", "Be kind.")
    stale = render_reference.stale_blocks(render_reference.documents())
    assert stale == ["docs/panel.md: rubric-profile-fit"]


def test_an_instruction_changed_in_the_code_makes_its_blocks_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rubrics, "DEFAULT_CRITERION", "for how pretty it is")
    stale = render_reference.stale_blocks(render_reference.documents())
    assert stale == ["docs/panel.md: judge-prompt-default"]
