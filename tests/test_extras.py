"""The base install and its named extras (image_project/extras.py): a run, the SQLite store
and ``runs stats`` need none of them; a feature that needs one stops before it starts and
names the extra to install."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from image_project.cli.command import main
from image_project.extras import EXTRA_OF, missing_extra

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = (REPO / "pyproject.toml").read_text(encoding="utf-8")


def test_every_extra_module_is_in_its_extra_and_not_in_the_base_install() -> None:
    import tomllib

    project = tomllib.loads(PYPROJECT)["project"]
    base = " ".join(project["dependencies"]).lower()
    extras = project["optional-dependencies"]
    for module, extra in EXTRA_OF.items():
        assert module not in base, module
        assert any(req.lower().startswith(module) for req in extras[extra]), (module, extra)
    assert "scipy" not in base
    assert extras["all"] == ["image_project[postgres,review]"]


def test_missing_extra_names_the_first_missing_module_and_its_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert missing_extra("the review site", "jinja2", "matplotlib") is None
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    assert missing_extra("the review site", "jinja2", "matplotlib") == (
        "the review site needs matplotlib, which the base install leaves out: "
        "pip install 'image-project[review]'"
    )


def test_review_without_its_extra_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "jinja2", None)
    assert main(["review"], env={}, root=tmp_path) == 2
    err = capsys.readouterr().err
    assert "error: the review site needs jinja2" in err
    assert "pip install 'image-project[review]'" in err
    assert not (tmp_path / "output" / "review").exists()


def test_a_postgres_store_without_psycopg_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    url = "store.url=postgresql+psycopg://me:hunter2@127.0.0.1:1/runs"
    assert main(["--prompt-only", "--set", url], env={}, root=tmp_path) == 2
    err = capsys.readouterr().err
    assert "configuration error: store.url: " in err
    assert "a PostgreSQL store needs psycopg" in err
    assert "pip install 'image-project[postgres]'" in err
    assert "hunter2" not in err
    assert not (tmp_path / "output" / "logs").exists()  # stopped before the run


# A fresh interpreter in which the extras' modules (and scipy) cannot be imported at all, as in
# a base install: every finder is asked after this one, which refuses them.
_BLOCKED_RUN = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    BLOCKED = {"psycopg", "jinja2", "matplotlib", "scipy"}

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    from image_project.cli.command import main

    code = main(sys.argv[2:], env={}, root=Path(sys.argv[1]))
    assert not BLOCKED & {m.split(".")[0] for m in sys.modules}
    sys.exit(code)
    """
)


def test_a_run_the_store_and_runs_stats_need_no_extra(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _BLOCKED_RUN, str(tmp_path), *args],
            capture_output=True,
            text=True,
            timeout=300,
        )

    panel = "prompt.scoring.judges=[{id: a, rubric: strict}, {id: b, rubric: profile_fit}]"
    generated = run("--seed", "3", "--set", "prompt.scoring.enabled=true", "--set", panel)
    assert generated.returncode == 0, generated.stderr
    (transcript,) = (tmp_path / "output" / "logs").glob("*_transcript.json")
    assert json.loads(transcript.read_text(encoding="utf-8"))["seed"] == 3
    assert (tmp_path / "output" / "logs" / "runs.sqlite").is_file()
    stats = run("runs", "stats")
    assert stats.returncode == 0, stats.stderr
    assert "Kendall" in stats.stdout and "a ~ b  0." in stats.stdout, stats.stdout
    review = run("review")
    assert review.returncode == 2
    assert "pip install 'image-project[review]'" in review.stderr
