"""docs/configuration.md's validation rules, for every key they cover: every boolean key
accepts only true/false/yes/no/1/0 (never YAML's ``on``), every int key refuses a float,
even a whole one. The keys are found by walking the config models, so a key added with a
plain ``bool`` or ``int`` (which pydantic would coerce) fails here."""

from __future__ import annotations

import subprocess
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import ConfigError


def _leaf_types(annotation: object) -> set[object]:
    """The plain types an annotation allows (``Annotated``, ``Optional`` and unions opened)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _leaf_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_leaf_types(arg) for arg in typing.get_args(annotation)))
    return {annotation}


def _keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, set[object]]]:
    """Every dotted key of the config's sections (mappings and lists of models left out)
    with the plain types its field allows."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        allowed = _leaf_types(field.annotation)
        nested = [t for t in allowed if isinstance(t, type) and issubclass(t, BaseModel)]
        if nested:
            yield from _keys(nested[0], f"{key}.")
        else:
            yield key, allowed


BOOL_KEYS = sorted(key for key, allowed in _keys(AppConfig) if bool in allowed)
INT_KEYS = sorted(
    key for key, allowed in _keys(AppConfig) if int in allowed and bool not in allowed
)


def _error(tmp_path: Path, override: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(root=tmp_path, env={}, overrides=[override])
    return info.value


def test_the_walk_finds_the_keys_the_docs_name() -> None:
    """Control: the walk reaches nested sections (else the tests below would check little)."""
    assert {"backend.structured_outputs", "upscale.tta", "context.enabled"} <= set(BOOL_KEYS)
    assert {"run.runs", "backend.max_output_tokens.card", "prompt.random_seed"} <= set(INT_KEYS)
    assert len(BOOL_KEYS) >= 12 and len(INT_KEYS) >= 30


@pytest.mark.parametrize("key", BOOL_KEYS)
def test_every_boolean_key_refuses_on_and_maybe_and_takes_no(key: str, tmp_path: Path) -> None:
    for word in ("on", "OFF", "maybe"):
        error = _error(tmp_path, f"{key}={word}")
        assert error.key == key
        assert error.message.startswith(f"got {word!r}, must be true or false")
    value: object = load_config(root=tmp_path, env={}, overrides=[f"{key}=no"])
    for part in key.split("."):
        value = getattr(value, part)
    assert value is False


@pytest.mark.parametrize("key", INT_KEYS)
def test_every_int_key_refuses_a_whole_float(key: str, tmp_path: Path) -> None:
    error = _error(tmp_path, f"{key}=4.0")
    assert error.key == key
    assert error.message.startswith("got 4.0, must be ")
    assert "(a float is not an int; write 4)" in error.message


def test_the_local_overlay_is_git_ignored() -> None:
    """``git check-ignore`` exits 0 for an ignored path and 1 for a path git would add."""
    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    probe = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", "config/config.local.yaml"],
        cwd=repo,
        check=False,
    )
    assert probe.returncode == 0, "config/config.local.yaml would be committed"
