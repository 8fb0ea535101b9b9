"""A run killed between its transcript and its store write does not stay out of the store
silently: the next run and ``runs list`` say how many transcripts in the log
folder the store lacks, with the exact command that imports them into this store."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.run.driver import run_generation
from image_project.store import open_store
from image_project.testing import FunctionTextBackend
from tests.test_app import REPO, answer, backends, make_cfg

pytestmark = pytest.mark.anyio


async def killed_before_its_store_write(tmp: Path, url: str) -> str:
    """One run stored, then one whose transcript was written but whose store write never
    happened (as when the process is killed between the two); its generation id."""
    await run_generation(make_cfg(tmp, f"store.url={url}"), backends(FunctionTextBackend(answer)))
    lost = await run_generation(
        make_cfg(tmp, f"store.url={url}", "store.enabled=false", "prompt.random_seed=2"),
        backends(FunctionTextBackend(answer)),
    )
    assert (tmp / "logs" / f"{lost.record.generation_id}_transcript.json").is_file()
    with open_store(url) as store:
        assert lost.record.generation_id not in store.stored_ids()
    return lost.record.generation_id


def command_in(line: str) -> list[str]:
    words = shlex.split(line.rsplit("import them: ", 1)[1])
    assert words[:3] == ["image-project", "runs", "import"]
    return words[1:]


def stored_ids(url: str) -> set[str]:
    with open_store(url) as store:
        return store.stored_ids()


async def test_the_next_run_names_the_lost_run_and_the_command_that_brings_it_back(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lost = await killed_before_its_store_write(tmp_path, store_url)
    lines: list[str] = []
    cfg = make_cfg(tmp_path, f"store.url={store_url}", "prompt.random_seed=3")
    await run_generation(cfg, backends(FunctionTextBackend(answer)), emit=lines.append)
    said = [line for line in lines if "not in" in line and "transcript" in line]
    assert len(said) == 1, lines
    assert said[0].startswith("! store: 1 run transcript(s) in ") and lost in said[0]
    command = command_in(said[0])
    assert command == ["runs", "import", str(tmp_path / "logs"), "--store", store_url]
    assert lost not in stored_ids(store_url)
    capsys.readouterr()
    assert cli.main(command, env={}, root=REPO) == 0
    assert "imported 1 run(s)" in capsys.readouterr().out
    assert lost in stored_ids(store_url) and len(stored_ids(store_url)) == 3


async def test_runs_list_names_the_lost_run_and_the_command_that_brings_it_back(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lost = await killed_before_its_store_write(tmp_path, store_url)
    config = ["--set", f"store.url={store_url}", "--set", f"image.log_path={tmp_path / 'logs'}"]
    capsys.readouterr()
    assert cli.main(["runs", "list", *config], env={}, root=REPO) == 0
    out, err = capsys.readouterr()
    assert lost not in out and len(out.strip().splitlines()) == 1 + 1
    assert err.count("\n") == 1 and err.startswith("1 run transcript(s) in ")
    command = command_in(err)
    assert command == ["runs", "import", str(tmp_path / "logs"), "--store", store_url]
    assert cli.main(command, env={}, root=REPO) == 0
    capsys.readouterr()
    assert cli.main(["runs", "list", *config], env={}, root=REPO) == 0
    out, err = capsys.readouterr()
    assert lost in out and err == ""  # back in the list, and nothing more to say


async def test_a_run_with_nothing_lost_says_nothing_more(tmp_path: Path, store_url: str) -> None:
    lines: list[str] = []
    for seed in (1, 2):
        cfg = make_cfg(tmp_path, f"store.url={store_url}", f"prompt.random_seed={seed}")
        await run_generation(cfg, backends(FunctionTextBackend(answer)), emit=lines.append)
    assert not [line for line in lines if line.startswith("! store")]
