"""Settings that only matter when another setting opens them: one that a config file sets
while that setting is closed would do nothing, and is a
:class:`~image_project.errors.ConfigError` at load time naming both keys (exit 2), instead
of a run that silently ignores it.

A key counts as *set* when a config file read wrote it (``config/config.yaml``, the local
overlay, ``--config``) with a value other than its default: ``config/config.yaml`` lists
every key at its default, so a key written at its default is not set. A list of sections
(``judges``) counts as one key, and its items' keys count too.

:data:`GATES` holds every dependency. A gate with no ``keys`` covers every key below its
section (sub-sections included) but the switch itself and the keys of
:data:`READ_WHEN_CLOSED`, which something reads with the gate closed. A key under several
closed gates (``prompt.scoring.evolution.generations`` with scoring off) names them all.

The overrides (``--set``, and the command-line options, which are overrides too) are one
run's changes, not settings kept in a file: a key they set is not checked (one list of
``--set`` serves runs with a feature on and off, as the benches' and tests' do), and a gate
they close leaves the keys the files set alone, kept for when it is open again (``--set
upscale.enabled=false`` for one run). A campaign's configuration (``base``) was checked when
it was submitted.

Settings that fall back to one another (``prompt.scoring.judge_model`` when every judge names
its own model, say) are not gates: the fallbacks are shared by the judges and the selector,
and a default for some roles is not a setting that does nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from image_project.config.fields import _Section
from image_project.errors import ConfigError, short_repr

if TYPE_CHECKING:
    from image_project.config.models import AppConfig


@dataclass(frozen=True)
class Gate:
    """``keys`` of ``section`` (all of them when empty) are read only while
    ``is_open(section)``; ``opens`` says in words what value of ``switch`` that is."""

    section: str
    switch: str
    opens: str
    is_open: Callable[[Any], bool]
    keys: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The dotted key of the switch."""
        return f"{self.section}.{self.switch}"

    def covers(self, pattern: str) -> bool:
        """Whether the key ``pattern`` (list indices written ``[]``) is one this gate closes."""
        if pattern == self.key or pattern in READ_WHEN_CLOSED:
            return False
        if not self.keys:
            return pattern.startswith(self.section + ".")
        return any(
            pattern == f"{self.section}.{key}" or pattern.startswith(f"{self.section}.{key}.")
            for key in self.keys
        )


def _enabled(section: Any) -> bool:
    return bool(section.enabled)


GATES: tuple[Gate, ...] = (
    Gate("prompt.scoring", "enabled", "true", _enabled),
    Gate(
        "prompt.scoring",
        "aggregation",
        "a weighted one (weighted_median, mean, trimmed_mean)",
        lambda s: s.aggregation != "median",
        keys=("judges[].weight",),
    ),
    Gate("prompt.scoring.novelty", "enabled", "true", _enabled),
    Gate(
        "prompt.scoring.novelty",
        "window",
        "above 0",
        lambda s: s.window > 0,
        keys=("penalty_per_share", "max_penalty", "min_share"),
    ),
    Gate("prompt.scoring.evolution", "enabled", "true", _enabled),
    Gate(
        "prompt.scoring.evolution",
        "selector",
        "'llm'",
        lambda s: s.selector == "llm",
        keys=("selector_model", "selector_backend"),
    ),
    Gate("run", "parallel", "'auto'", lambda s: s.parallel == "auto", keys=("parallel_cap",)),
    Gate("context", "enabled", "true", _enabled),
    Gate(
        "context",
        "injectors",
        "a list holding 'season'",
        lambda s: "season" in s.injectors,
        keys=("season",),
    ),
    Gate(
        "context",
        "injectors",
        "a list holding 'holiday'",
        lambda s: "holiday" in s.injectors,
        keys=("holiday",),
    ),
    Gate("upscale", "enabled", "true", _enabled),
    Gate(
        "upscale",
        "target_width_px",
        "null (an explicit size is the target whatever the long edge)",
        lambda s: s.target_width_px is None,
        keys=("target_long_edge_px",),
    ),
    Gate("store", "enabled", "true", _enabled),
)
"""Every dependency between settings (see the module docstring)."""

READ_WHEN_CLOSED: Mapping[str, str] = {
    "store.url": "the runs and review commands read the store whether runs are written or not",
    "upscale.output_path": "the review site and runs import find the 4K images made earlier "
    "there, whether this run makes one or not",
}
"""Keys under a gate that something reads while it is closed, and what reads them."""


def check_dependencies(
    config: AppConfig, from_files: Mapping[str, Any], overridden: Sequence[str] = ()
) -> None:
    """Raise :class:`ConfigError` for the first key the files set that a closed gate makes do
    nothing (and name the others). ``from_files``: the files' merged mapping, before the
    overrides; ``overridden``: the dotted keys the overrides wrote (see the module
    docstring)."""
    problems: list[tuple[str, object, list[Gate]]] = []
    for key, value in _set_keys(config, ""):
        if any(key.startswith((found + ".", found + "[")) for found, _, _ in problems):
            continue
        if _written(key, overridden) or not _in(from_files, key):
            continue
        pattern = re.sub(r"\[\d+\]", "[]", key)
        closed = [g for g in GATES if g.covers(pattern) and not g.is_open(_at(config, g.section))]
        if closed and not all(_written(g.key, overridden) for g in closed):
            problems.append((key, value, closed))
    if problems:
        key, value, closed = problems[0]
        message = _message(config, value, closed)
        if len(problems) > 1:
            message += "; the same for " + ", ".join(k for k, _, _ in problems[1:])
        raise ConfigError(key, message)


def _message(config: AppConfig, value: object, closed: list[Gate]) -> str:
    wants = " and ".join(f"{g.key} is {g.opens}" for g in closed)
    values = " and ".join(_shown(_at(config, g.key)) for g in closed)
    now = f"it is {values}" if len(closed) == 1 else f"they are {values}"
    if all(g.opens == "true" for g in closed):
        fix = "add " + " ".join(f"--set {g.key}=true" for g in closed)
    else:
        fix = "change " + " and ".join(g.key for g in closed)
    return f"got {_shown(value)}, which does nothing unless {wants} ({now}); {fix}, or drop it"


def _set_keys(model: BaseModel, prefix: str) -> Iterator[tuple[str, object]]:
    """``(dotted key, value)`` of every key of ``model`` written with a value other than its
    default, in the schema's order."""
    for name, field in type(model).model_fields.items():
        if name not in model.model_fields_set or field.exclude:
            continue
        value = getattr(model, name)
        key = f"{prefix}.{name}" if prefix else name
        if isinstance(value, _Section):
            yield from _set_keys(value, key)
            continue
        if value == field.get_default(call_default_factory=True):
            continue
        yield key, value
        if isinstance(value, tuple):
            for index, item in enumerate(value):
                if isinstance(item, _Section):
                    yield from _set_keys(item, f"{key}[{index}]")


def _written(key: str, overridden: Sequence[str]) -> bool:
    """Whether an override wrote ``key`` (or a mapping or list holding it)."""
    return any(key == done or key.startswith((done + ".", done + "[")) for done in overridden)


def _in(data: Mapping[str, Any], key: str) -> bool:
    """Whether the mapping ``data`` holds ``key`` (``a.b[1].c``)."""
    node: Any = data
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(node, list) or index >= len(node):
                return False
            node = node[index]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return False
    return True


def _at(config: AppConfig, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, date | Path):
        return str(value)
    if isinstance(value, tuple) and value and all(isinstance(v, BaseModel) for v in value):
        return f"a list of {len(value)}"
    return short_repr(value)
