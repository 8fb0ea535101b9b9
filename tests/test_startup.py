"""Start-up cost: the OpenAI SDK is imported only when the OpenAI-compatible backend is built,
SQLAlchemy only when a run store is written or read, Pillow only when an image is drawn or
saved, and the scoring stage only when scoring is on; the objects the imports make are frozen
out of the garbage collector (``image_project.cli.launch``).

``openai`` was most of the import time of the command line, and ``--help`` or an offline run
never use it; SQLAlchemy's import is most of the rest, and a run with ``store.enabled:
false`` does not need it. Each check runs in a fresh interpreter (``sys.modules`` of the test
process already holds everything), offline, with no OpenAI variables in the environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import contextlib, io, json, sys
import image_project.cli.command as cli
watched = sys.argv[2]
after_import = watched in sys.modules
argv = json.loads(sys.argv[1])
code = None
if argv is not None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = cli.main(argv, env={})
        except SystemExit as exc:
            code = exc.code
print(json.dumps({"after_import": after_import, "after_run": watched in sys.modules,
                  "code": code}))
"""


def run_probe(code: str, *args: str) -> dict[str, object]:
    """Run ``code`` with ``args`` in a fresh interpreter (offline, no OpenAI variables): the
    JSON object its last line prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "IMAGE_PROJECT"))}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def probe(argv: list[str] | None, watched: str = "openai") -> dict[str, object]:
    """Run the CLI with ``argv`` (None: only import it) in a fresh interpreter: whether
    ``watched`` was imported after the import and after the run, and the exit code."""
    return run_probe(_PROBE, json.dumps(argv), watched)


def outputs(tmp_path: Path) -> list[str]:
    return [
        *("--set", f"image.log_path={tmp_path / 'logs'}"),
        *("--set", f"image.generation_path={tmp_path / 'images'}"),
        *("--set", f"prompt.generations_path={tmp_path / 'generations.csv'}"),
    ]


def test_help_does_not_import_openai() -> None:
    result = probe(["--help"])
    assert result == {"after_import": False, "after_run": False, "code": 0}


def test_offline_prompt_only_run_does_not_import_openai(tmp_path: Path) -> None:
    result = probe(["--offline", "--prompt-only", "--seed", "7", *outputs(tmp_path)])
    assert result == {"after_import": False, "after_run": False, "code": 0}
    assert list((tmp_path / "logs").glob("*_transcript.json"))


def test_the_openai_backend_still_imports_it_when_chosen(tmp_path: Path) -> None:
    """The control: building the OpenAI-compatible backend (no network: a prompt-only run
    against a closed port fails in the pre-flight probe, before any call) does import the
    SDK."""
    argv = [
        *("--set", "backend.provider=openai"),
        *("--set", "backend.base_url=http://127.0.0.1:9/v1"),
        *("--set", "backend.max_attempts=1"),
        "--prompt-only",
        *outputs(tmp_path),
    ]
    result = probe(argv)
    assert result["after_import"] is False and result["after_run"] is True
    assert result["code"] == 2  # the pre-flight probe found the port closed: exit 2


def test_a_run_without_the_store_does_not_import_sqlalchemy(tmp_path: Path) -> None:
    """With ``store.enabled: false`` no process imports SQLAlchemy; the controls: a run that
    creates the store and one that writes into it do, and both runs are in the store."""
    argv = ["--offline", "--prompt-only", *outputs(tmp_path)]
    off = probe([*argv, "--seed", "6", "--set", "store.enabled=false"], watched="sqlalchemy")
    assert off == {"after_import": False, "after_run": False, "code": 0}
    first = probe([*argv, "--seed", "7"], watched="sqlalchemy")
    assert first == {"after_import": False, "after_run": True, "code": 0}
    second = probe([*argv, "--seed", "8"], watched="sqlalchemy")
    assert second == {"after_import": False, "after_run": True, "code": 0}

    from image_project.store import open_store

    with open_store(f"sqlite:///{tmp_path / 'logs' / 'runs.sqlite'}") as store:
        assert sorted(r.seed for r in store.records()) == [7, 8]


def test_a_prompt_only_run_imports_neither_pillow_nor_the_scoring_stage(tmp_path: Path) -> None:
    argv = ["--offline", "--prompt-only", "--seed", "7", *outputs(tmp_path)]
    for module in ("PIL", "image_project.stages.scoring", "anyio.from_thread"):
        assert probe(argv, watched=module) == {
            "after_import": False,
            "after_run": False,
            "code": 0,
        }, module


def test_pillow_and_the_scoring_stage_are_imported_when_used(tmp_path: Path) -> None:
    """The controls: a run that draws and saves an image imports Pillow; a scoring run
    imports the scoring stage."""
    image_run = ["--offline", "--seed", "7", *outputs(tmp_path / "image")]
    assert probe(image_run, watched="PIL") == {"after_import": False, "after_run": True, "code": 0}
    assert list((tmp_path / "image" / "images").glob("*.jpg"))
    drawn = probe(image_run, watched="anyio.from_thread")  # the offline drawing's worker thread
    assert drawn == {"after_import": False, "after_run": True, "code": 0}
    scoring_run = [
        *("--offline", "--prompt-only", "--seed", "7", *outputs(tmp_path / "scoring")),
        *("--set", "prompt.scoring.enabled=true"),
    ]
    assert probe(scoring_run, watched="image_project.stages.scoring") == {
        "after_import": False,
        "after_run": True,
        "code": 0,
    }


_SCHEMA_PROBE = """
import contextlib, io, json, sys
import image_project.cli.command as cli
from image_project.config.models import AppConfig
from image_project.record.run import RunRecord
models = (AppConfig, RunRecord)
after_import = [m.__pydantic_complete__ for m in models]
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = cli.main(json.loads(sys.argv[1]), env={})
print(json.dumps({"after_import": after_import,
                  "after_run": [m.__pydantic_complete__ for m in models], "code": code}))
"""


def test_the_config_and_record_models_build_their_validators_when_first_used(
    tmp_path: Path,
) -> None:
    """Importing the command line builds no pydantic validator for the config or the
    transcript models (``defer_build``: ``--help`` never needs them); a run builds both."""
    argv = ["--offline", "--prompt-only", "--seed", "7", *outputs(tmp_path)]
    result = run_probe(_SCHEMA_PROBE, json.dumps(argv))
    assert result == {"after_import": [False, False], "after_run": [True, True], "code": 0}


_GC_PROBE = """
import gc, json, sys
from pathlib import Path
from image_project.cli.launch import launch
sys.argv = ["main.py", *json.loads(sys.argv[1])]
code = launch(prog="main.py", root=Path.cwd())
print(json.dumps({"frozen": gc.get_freeze_count(), "enabled": gc.isenabled(), "code": code}))
"""


def test_launch_freezes_what_the_imports_made_and_runs_with_the_collector_on(
    tmp_path: Path,
) -> None:
    argv = ["--offline", "--prompt-only", "--seed", "7", *outputs(tmp_path)]
    result = run_probe(_GC_PROBE, json.dumps(argv))
    assert result["code"] == 0 and result["enabled"] is True
    # The command line's modules, classes and schemas: tens of thousands of objects.
    frozen = result["frozen"]
    assert isinstance(frozen, int) and frozen > 20_000
