"""Plugin injectors: a module named in ``context.plugins`` is imported and checked before
any model call (a module that cannot be imported, has no ``injector`` or one of the wrong
shape, a taken name, settings for no plugin: exit 2 naming the key); a plugin gets its
settings and its own random stream, and is recorded like a built-in; one that fails or
answers in the wrong shape at run time fails the run in phase ``context``, before any call."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.config.context_section import ContextConfig
from image_project.config.loading import load_config
from image_project.context.loading import load_injectors
from image_project.errors import ConfigError
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.testing import FunctionTextBackend
from tests.test_app import REPO, answer, backends, make_cfg, transcript

_names = itertools.count()

MOON = """
from image_project import Injection, InjectorInput

class Moon:
    name = "moon"

    def inject(self, given: InjectorInput) -> Injection:
        roll = given.rng.random()
        phase = given.settings.get("phase", "full")
        return Injection(
            applied=True,
            reason="moon_phase",
            guidance=(f"- A {phase} moon hangs low.",),
            probability=1.0,
            roll=roll,
            metadata={"phase": phase, "day": given.today.isoformat()},
        )

injector = Moon()
"""


def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> str:
    """A fresh importable module holding ``source``; its name."""
    name = f"ctx_plugin_{next(_names)}"
    where = tmp_path / "plugins"
    where.mkdir(exist_ok=True)
    (where / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(where))
    return name


def context_cfg(*extra: str) -> ContextConfig:
    return load_config(root=REPO, env={}, overrides=["context.enabled=true", *extra]).context


def load_error(*extra: str) -> ConfigError:
    cfg = context_cfg(*extra)
    with pytest.raises(ConfigError) as info:
        load_injectors(cfg)
    return info.value


def test_a_plugin_is_loaded_after_the_builtins_with_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = plugin(tmp_path, monkeypatch, MOON)
    loaded = load_injectors(
        context_cfg(f"context.plugins=[{name}]", "context.plugin_settings={moon: {phase: new}}")
    )
    assert [(i.name, i.source, i.module) for i in loaded] == [
        ("season", "builtin", None),
        ("holiday", "builtin", None),
        ("moon", "plugin", name),
    ]
    assert loaded[2].settings == {"phase": "new"}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("raise RuntimeError('broken on import')", "RuntimeError: broken on import"),
        ("import sys\nsys.exit(3)", "it called sys.exit(3) while being imported"),
        ("raise SystemExit", "it called sys.exit(None) while being imported"),
        ("x = 1", "has no `injector`"),
        ("class I:\n    name = 'Bad Name'\n    def inject(self, g): ...\ninjector = I()", "name"),
        ("class I:\n    name = 'ok'\n    inject = 3\ninjector = I()", "no callable `inject`"),
        ("class I:\n    name = 'holiday'\n    def inject(self, g): ...\ninjector = I()", "taken"),
    ],
)
def test_a_bad_plugin_is_a_config_error_naming_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: str
) -> None:
    name = plugin(tmp_path, monkeypatch, source)
    error = load_error(f"context.plugins=[{name}]")
    assert error.key == "context.plugins[0]" and expected in error.message


def test_a_missing_module_and_settings_for_no_plugin_are_config_errors() -> None:
    missing = load_error("context.plugins=[no_such_pkg.injector]")
    assert missing.key == "context.plugins[0]" and "No module named 'no_such_pkg'" in str(missing)
    orphan = load_error("context.plugin_settings={moon: {phase: new}}")
    assert orphan.key == "context.plugin_settings.moon"


def test_a_plugin_calling_sys_exit_at_import_is_reported_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = plugin(tmp_path, monkeypatch, "import sys\nsys.exit(3)")
    code = cli.main(
        [
            "--offline",
            "--set",
            "context.enabled=true",
            "--set",
            f"context.plugins=[{name}]",
            "--set",
            f"image.log_path={tmp_path / 'logs'}",
        ],
        env={},
        root=REPO,
    )
    err = capsys.readouterr().err
    assert code == cli.EXIT_CONFIG
    assert f"configuration error: context.plugins[0]: cannot import {name!r}: it called" in err
    assert "it called sys.exit(3) while being imported" in err


def test_the_cli_exits_2_before_any_call_for_a_bad_plugin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "--offline",
            "--set",
            "context.enabled=true",
            "--set",
            "context.plugins=[no_such_pkg.injector]",
            "--set",
            f"image.log_path={tmp_path / 'logs'}",
        ],
        env={},
        root=REPO,
    )
    err = capsys.readouterr().err
    assert code == cli.EXIT_CONFIG
    assert "configuration error: context.plugins[0]: cannot import 'no_such_pkg.injector'" in err
    assert not (tmp_path / "logs").exists()  # nothing ran


@pytest.mark.anyio
async def test_a_plugin_runs_with_its_own_stream_and_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = plugin(tmp_path, monkeypatch, MOON)
    cfg = make_cfg(
        tmp_path,
        "context.enabled=true",
        "context.date=2026-10-25",
        f"context.plugins=[{name}]",
    )
    await run_generation(cfg, backends(FunctionTextBackend(answer)))
    data = transcript(tmp_path)
    moon = data["context"]["injectors"][-1]
    assert (moon["name"], moon["source"], moon["module"], moon["applied"]) == (
        "moon",
        "plugin",
        name,
        True,
    )
    from image_project.seeding import rng_for

    assert moon["roll"] == rng_for(1234, "context", "moon").random()
    assert moon["metadata"] == {"phase": "full", "day": "2026-10-25"}
    assert data["context"]["guidance"].endswith("- A full moon hangs low.")
    first = next(s for s in data["steps"] if s["path"] == "pipeline/initial_prompt/draft")
    assert first["prompt"].endswith(data["context"]["guidance"])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("raise ValueError('no moon tonight')", "ValueError: no moon tonight"),
        ("return 'a moon'", "returned str"),
        ("return Injection(applied=False, reason='x', guidance=('a',))", "did not apply"),
        ("return Injection(applied=True, reason='x', roll=1.5)", "roll"),
        ("return Injection(applied=True, reason='x', metadata={'when': given.today})", "metadata"),
    ],
)
async def test_a_plugin_failing_at_run_time_fails_the_run_before_any_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, expected: str
) -> None:
    source = (
        "from image_project import Injection\n"
        "class Broken:\n"
        "    name = 'broken'\n"
        "    def inject(self, given):\n"
        f"        {body}\n"
        "injector = Broken()\n"
    )
    name = plugin(tmp_path, monkeypatch, source)
    text = FunctionTextBackend(answer)
    cfg = make_cfg(tmp_path, "context.enabled=true", f"context.plugins=[{name}]")
    with pytest.raises(RunFailed) as failed:
        await run_generation(cfg, backends(text))
    assert failed.value.phase == "context"
    assert failed.value.error.type == "ContextInjectorError"
    assert "context injector 'broken'" in failed.value.error.message
    assert expected in failed.value.error.message
    assert text.requests == []
    assert json.loads(json.dumps(transcript(tmp_path)["context"])) == {"enabled": False}
