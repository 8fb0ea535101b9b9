"""Which injectors a run has: the built-ins named in ``context.injectors`` (in that order),
then the plugins of ``context.plugins`` (in that order), each checked before any model call.

:func:`load_injectors` imports every plugin module and checks its ``injector`` (a ``name``
of lower-case letters, digits and ``_``, unique among the injectors, built-in names
included, and a callable ``inject``); it makes sure the ``holidays`` package knows the
holiday calendar, and that every ``context.plugin_settings`` entry names a plugin. Every
problem is a :class:`~image_project.errors.ConfigError` naming its key
(``context.plugins[1]``, ``context.holiday.country``), so the CLI exits 2 before any call.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from image_project.config.context_section import BUILTIN_INJECTORS, ContextConfig
from image_project.context.base import INJECTOR_NAME, Injector
from image_project.context.holiday import HolidayInjector
from image_project.context.season import SeasonInjector
from image_project.errors import ConfigError

_SHAPE = (
    "a plugin module defines `injector`, an object with a `name` (lower-case letters, digits "
    "and _) and an `inject(given)` method returning image_project.context.Injection"
)


@dataclass(frozen=True)
class LoadedInjector:
    """One injector of the run, where it came from, and its settings."""

    injector: Injector
    source: Literal["builtin", "plugin"]
    module: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.injector.name


def load_injectors(cfg: ContextConfig) -> tuple[LoadedInjector, ...]:
    """The run's injectors, checked (see the module docstring). Raises ConfigError."""
    loaded: list[LoadedInjector] = []
    for name in cfg.injectors:
        injector: Injector = (
            SeasonInjector(cfg.season) if name == "season" else HolidayInjector.checked(cfg.holiday)
        )
        loaded.append(LoadedInjector(injector, "builtin"))
    taken: set[str] = set(BUILTIN_INJECTORS)
    for index, module_name in enumerate(cfg.plugins):
        plugin = _plugin(f"context.plugins[{index}]", module_name, taken)
        taken.add(plugin.name)
        loaded.append(
            LoadedInjector(
                plugin, "plugin", module_name, dict(cfg.plugin_settings.get(plugin.name, {}))
            )
        )
    plugins = sorted(item.name for item in loaded if item.source == "plugin")
    for named in cfg.plugin_settings:
        if named not in plugins:
            raise ConfigError(
                f"context.plugin_settings.{named}",
                "names no plugin injector; "
                + (f"the plugins are: {', '.join(plugins)}" if plugins else "no plugin is loaded"),
            )
    return tuple(loaded)


def _plugin(key: str, module_name: str, taken: set[str]) -> Injector:
    try:
        module = importlib.import_module(module_name)
    except SystemExit as exc:  # sys.exit() in the user's module must not end the program
        raise ConfigError(
            key,
            f"cannot import {module_name!r}: it called sys.exit({exc.code!r}) while being "
            "imported; a plugin module must define `injector`, not exit",
        ) from exc
    except Exception as exc:  # any failure of the user's module is a configuration error
        raise ConfigError(
            key, f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    injector = getattr(module, "injector", None)
    if injector is None:
        raise ConfigError(key, f"module {module_name!r} has no `injector`; {_SHAPE}")
    name = getattr(injector, "name", None)
    if not isinstance(name, str) or not INJECTOR_NAME.fullmatch(name):
        raise ConfigError(
            key,
            f"{module_name}.injector.name: got {name!r}, must be a string matching "
            f"{INJECTOR_NAME.pattern}; {_SHAPE}",
        )
    if not callable(getattr(injector, "inject", None)):
        raise ConfigError(key, f"{module_name}.injector has no callable `inject`; {_SHAPE}")
    if name in taken:
        raise ConfigError(
            key,
            f"{module_name}.injector.name {name!r} is taken (by a built-in injector or an "
            "earlier plugin); injector names must be unique",
        )
    assert isinstance(injector, Injector)
    return injector
