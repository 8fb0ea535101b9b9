"""The built-in defaults shipped in the package and ``image-project init``: the
config search order, and the console script working from any directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from image_project.cli.command import main
from image_project.config.defaults import (
    BUILTIN_CONFIG,
    BUILTIN_DIR,
    BUILTIN_INPUTS,
    STARTER_FILES,
)
from image_project.config.loading import CONFIG_ENV_VAR, load_config

REPO = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPT = Path(sys.executable).parent / "image-project"


@pytest.mark.parametrize("name", STARTER_FILES)
def test_the_checkouts_config_files_are_links_to_the_shipped_defaults(name: str) -> None:
    """One source: the package's file is the real one, the checkout's ``config/`` links to it
    (so ``python main.py`` in a checkout and an installed ``image-project`` read one file)."""
    shipped = BUILTIN_DIR / name
    checkout = REPO / "config" / name
    assert not shipped.is_symlink() and shipped.is_file()
    assert checkout.is_symlink(), (
        f"config/{name} must stay a link to image_project/defaults/{name} (edit that file); "
        f"to restore it: ln -sf ../image_project/defaults/{name} config/{name}"
    )
    assert checkout.resolve() == shipped.resolve()
    assert checkout.read_bytes() == shipped.read_bytes()


# --------------------------------------------------------------------------- search order


def test_an_empty_directory_runs_on_the_built_in_defaults(tmp_path: Path) -> None:
    cfg = load_config(root=tmp_path, env={})
    assert cfg.sources == (str(BUILTIN_CONFIG),)
    assert cfg.prompt.categories_path == BUILTIN_INPUTS["categories_path"]
    assert cfg.prompt.profile_path == BUILTIN_INPUTS["profile_path"]
    # Everything else relative lands where the user runs.
    assert cfg.image.log_path == tmp_path.resolve() / "output" / "logs"
    assert cfg.prompt.generations_path == tmp_path.resolve() / "output" / "generations.csv"
    # The same values as the checkout's config, but for the shipped inputs' location.
    checkout = load_config(root=tmp_path, config_path=REPO / "config" / "config.yaml", env={})
    same = {"sources": (), "prompt": cfg.prompt}
    assert checkout.model_copy(update=same) == cfg.model_copy(update=same)


def test_the_search_order(tmp_path: Path) -> None:
    local = tmp_path / "config"
    local.mkdir()
    (local / "config.local.yaml").write_text("run: {runs: 2}\n", encoding="utf-8")
    on_builtin = load_config(root=tmp_path, env={})
    assert on_builtin.sources == (str(BUILTIN_CONFIG), str(local / "config.local.yaml"))
    assert on_builtin.run.runs == 2  # the overlay applies to the built-in config too

    (local / "config.yaml").write_text("run: {runs: 3}\n", encoding="utf-8")
    here = load_config(root=tmp_path, env={})
    assert here.sources[0] == str(local / "config.yaml") and here.run.runs == 2
    assert here.prompt.categories_path == tmp_path.resolve() / "config" / "categories.csv"

    named = tmp_path / "named.yaml"
    named.write_text("run: {runs: 4}\n", encoding="utf-8")
    from_env = load_config(root=tmp_path, env={CONFIG_ENV_VAR: str(named)})
    assert (from_env.sources, from_env.run.runs) == ((str(named),), 4)
    given = tmp_path / "given.yaml"
    given.write_text("run: {runs: 5}\n", encoding="utf-8")
    from_flag = load_config(root=tmp_path, config_path=given, env={CONFIG_ENV_VAR: str(named)})
    assert (from_flag.sources, from_flag.run.runs) == ((str(given),), 5)


def test_a_config_yaml_that_is_a_directory_is_still_an_error(tmp_path: Path) -> None:
    (tmp_path / "config" / "config.yaml").mkdir(parents=True)
    with pytest.raises(Exception, match="is a directory"):
        load_config(root=tmp_path, env={})


# --------------------------------------------------------------------------- init


def test_init_writes_the_starter_files_and_says_what_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"], env={}) == 0
    out = capsys.readouterr().out
    for name in STARTER_FILES:
        written = tmp_path / "config" / name
        assert written.read_bytes() == (BUILTIN_DIR / name).read_bytes()
        assert f"wrote {Path('config') / name}" in out
    assert "Next: image-project --prompt-only" in out

    (tmp_path / "config" / "profile.csv").write_text("mine\n", encoding="utf-8")
    assert main(["init"], env={}) == 2
    err = capsys.readouterr().err
    assert "not overwriting" in err and "--force" in err
    assert (tmp_path / "config" / "profile.csv").read_text(encoding="utf-8") == "mine\n"
    assert main(["init", "--force"], env={}) == 0
    assert (tmp_path / "config" / "profile.csv").read_bytes() == (
        BUILTIN_DIR / "profile.csv"
    ).read_bytes()


def test_init_into_another_directory_says_to_cd_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "my project"], env={}, prog="python -m image_project") == 0
    out = capsys.readouterr().out
    assert (tmp_path / "my project" / "config" / "config.yaml").is_file()
    assert "Next: cd 'my project' && python -m image_project --prompt-only" in out
    (tmp_path / "blocked").write_text("a file, not a directory", encoding="utf-8")
    assert main(["init", "blocked"], env={}) == 2
    assert "init: cannot write blocked/config" in capsys.readouterr().err


def test_the_cli_runs_on_the_built_in_defaults_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--prompt-only", "--seed", "4"], env={}, root=tmp_path)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"No config/config.yaml in {tmp_path.resolve()}: using the built-in defaults" in (
        captured.err
    )
    (transcript,) = (tmp_path / "output" / "logs").glob("*_transcript.json")
    assert json.loads(transcript.read_text(encoding="utf-8"))["seed"] == 4


# --------------------------------------------------------------------------- the console script


def test_init_then_prompt_only_from_an_empty_directory_outside_the_checkout(
    tmp_path: Path,
) -> None:
    if not CONSOLE_SCRIPT.exists():
        pytest.skip(f"console script not installed at {CONSOLE_SCRIPT}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "IMAGE_PROJECT"))}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CONSOLE_SCRIPT), *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    init = run("init")
    assert init.returncode == 0, init.stderr
    assert "Next: image-project --prompt-only" in init.stdout
    assert sorted(p.name for p in (tmp_path / "config").iterdir()) == sorted(STARTER_FILES)
    generated = run("--prompt-only", "--seed", "42")
    assert generated.returncode == 0, generated.stderr
    assert "built-in defaults" not in generated.stderr  # it read the config init wrote
    assert "\n  Prompt      " in generated.stdout and " + 0 image" in generated.stdout
    (transcript,) = (tmp_path / "output" / "logs").glob("*_transcript.json")
    assert json.loads(transcript.read_text(encoding="utf-8"))["seed"] == 42
