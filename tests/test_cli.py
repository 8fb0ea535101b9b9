"""The command line as a user runs it: offline end to end, exit codes, errors."""

from __future__ import annotations

import csv
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from PIL import Image, ImageChops, ImageStat

from image_project.backends.base import ImageRequest
from image_project.backends.offline.image import OfflineImageBackend
from image_project.cli.command import _with_command, build_parser, main
from image_project.seeding import derive_seed
from image_project.stages.concepts import load_categories, select_concepts
from image_project.stages.standard import Brief
from tests.support.openai_server import OpenAIServer, Reply, chat_completion, error_body
from tests.support.pipeline import pipeline_shape

REPO = Path(__file__).resolve().parents[1]


def write_config(tmp: Path, **extra: Any) -> Path:
    cfg = {
        "image": {
            "generation_path": str(tmp / "out" / "images"),
            "log_path": str(tmp / "out" / "logs"),
        },
        "prompt": {
            "categories_path": str(REPO / "config" / "categories.csv"),
            "profile_path": str(REPO / "config" / "profile.csv"),
            "generations_path": str(tmp / "out" / "generations.csv"),
            **extra.get("prompt", {}),
        },
        **{k: v for k, v in extra.items() if k != "prompt"},
    }
    path = tmp / "my_config.yaml"
    path.write_text(json.dumps(cfg), encoding="utf-8")  # JSON is valid YAML
    return path


def run_main(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    return subprocess.run(
        [sys.executable, str(REPO / "main.py"), *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_main_runs_offline_end_to_end_twice(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    first = run_main(tmp_path, "--config", str(config), "--seed", "7")
    assert first.returncode == 0, first.stderr
    assert "OFFLINE" in first.stdout
    assert "Title       #001 - " in first.stdout

    logs = tmp_path / "out" / "logs"
    (t_path,) = logs.glob("*_transcript.json")
    data = json.loads(t_path.read_text(encoding="utf-8"))
    assert data["backend"]["provider"] == "offline" and data["seed"] == 7
    paths = [s["path"] for s in data["steps"]]
    brief = Brief(("a", "b", "c"), "Likes:\n- x")
    shape = anyio.run(functools.partial(pipeline_shape, brief, run_seed=7, refinement="final"))
    assert paths == ["dislike_rewrite", *shape.paths, "image", "title"]
    assert (logs / f"{data['generation_id']}.log").exists()

    image_path = Path(data["image_path"])
    with Image.open(image_path) as img:
        assert img.format == "JPEG"
        captioned = img.convert("RGB")
    # Re-render the uncaptioned image (the offline backend is deterministic): the caption
    # strip changed the bottom rows and nothing else.
    raw = anyio.run(
        OfflineImageBackend().generate,
        ImageRequest(
            prompt=data["final_image_prompt"],
            model="offline-image-1",
            size="1536x1024",
            quality="high",
            seed=derive_seed(7, "image"),
        ),
    )
    from io import BytesIO

    original = Image.open(BytesIO(raw.data)).convert("RGB")
    assert original.size == captioned.size
    w, h = captioned.size
    diff = ImageChops.difference(original, captioned)
    top = ImageStat.Stat(diff.crop((0, 0, w, h // 2))).mean
    bottom = ImageStat.Stat(diff.crop((0, int(h * 0.97), w, h))).mean
    assert max(top) < 6, top  # JPEG noise only
    assert sum(bottom) / 3 > 20, bottom  # the caption strip

    manifest = read_csv(tmp_path / "out" / "images" / "titles_manifest.csv")
    generations = read_csv(tmp_path / "out" / "generations.csv")
    assert [r["seq"] for r in manifest] == ["1"]
    assert manifest[0]["generation_id"] == data["generation_id"]
    assert manifest[0]["image_prompt"] == data["final_image_prompt"]
    assert manifest[0]["title"] == data["title_generation"]["title"]
    assert generations[0]["final_image_prompt"] == data["final_image_prompt"]
    assert json.loads(generations[0]["selected_concepts"]) == data["selected_concepts"]

    second = run_main(tmp_path, "--config", str(config), "--seed", "7")
    assert second.returncode == 0, second.stderr
    manifest = read_csv(tmp_path / "out" / "images" / "titles_manifest.csv")
    assert [r["seq"] for r in manifest] == ["1", "2"]
    assert manifest[0]["title"].lower() != manifest[1]["title"].lower()
    assert len(read_csv(tmp_path / "out" / "generations.csv")) == 2
    assert "#002 - " in second.stdout


def test_config_error_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    code = main(["--config", str(config), "--set", "prompt.scoring.num_ideas=1"], env={}, root=REPO)
    assert code == 2
    err = capsys.readouterr().err
    assert "prompt.scoring.num_ideas" in err and "1" in err
    assert not (tmp_path / "out").exists()


def test_unknown_key_exits_2_with_a_suggestion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--config", str(write_config(tmp_path)), "--set", "run.rusn=2"], env={}, root=REPO)
    assert code == 2
    assert "runs" in capsys.readouterr().err


def test_missing_categories_file_exits_2_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, prompt={"categories_path": str(tmp_path / "nope.csv")})
    code = main(["--config", str(config)], env={}, root=REPO)
    assert code == 2
    assert "nope.csv" in capsys.readouterr().err
    assert not (tmp_path / "out" / "logs").exists()


def test_model_failure_through_http_exits_1_with_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    # The dislike rewrite keeps the seed's concepts (an answer that drops them is re-asked).
    concepts = select_concepts(load_categories(REPO / "config" / "categories.csv"), 3)
    with OpenAIServer() as server:
        server.script(
            Reply(body=chat_completion(json.dumps({"concepts": list(concepts)}))),
            Reply(body=chat_completion("four themes")),  # initial_prompt/draft
            Reply(
                status=400,
                body={
                    "error": {
                        "message": "bad request for stage 2",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            ),
        )
        config = write_config(
            tmp_path,
            backend={"base_url": server.base_url, "max_attempts": 1},
            prompt={"refinement": "none"},
        )
        code = main(["--config", str(config), "--seed", "3"], env={}, root=REPO)
        assert len(server.requests) == 3
    assert code == 1
    err = capsys.readouterr().err
    assert "pipeline/section_2_choice/draft" in err
    (t_path,) = (tmp_path / "out" / "logs").glob("*_transcript.json")
    error = json.loads(t_path.read_text(encoding="utf-8"))["error"]
    assert error["type"] == "RequestRejectedError"
    assert (error["phase"], error["path"]) == ("pipeline", "pipeline/section_2_choice/draft")
    assert not (tmp_path / "out" / "generations.csv").exists()
    assert list((tmp_path / "out" / "images").iterdir()) == []  # checked before the run, empty


def test_insufficient_quota_is_one_request_exit_1_and_says_the_quota_is_used_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    quota = error_body(
        "You exceeded your current quota, please check your plan and billing details.",
        type="insufficient_quota",
        code="insufficient_quota",
    )
    with OpenAIServer() as server:
        server.script(*[Reply(status=429, body=quota)] * 5)
        config = write_config(tmp_path, backend={"base_url": server.base_url})  # 4 attempts
        code = main(["--config", str(config), "--seed", "3"], env={}, root=REPO)
        requests = len(server.requests)
    assert (code, requests) == (1, 1)
    err = capsys.readouterr().err
    assert "quota of the account behind OPENAI_API_KEY is used up (insufficient_quota" in err
    assert "Not retried" in err and "transport retry" not in err
    (t_path,) = (tmp_path / "out" / "logs").glob("*_transcript.json")
    error = json.loads(t_path.read_text(encoding="utf-8"))["error"]
    assert (error["type"], error["status"], error["attempts"]) == ("QuotaExceededError", 429, 1)


def test_runs_flag_makes_several_generations_with_derived_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    code = main(
        ["--config", str(config), "--offline", "--runs", "2", "--seed", "5", "-q"],
        env={},
        root=REPO,
    )
    assert code == 0
    manifest = read_csv(tmp_path / "out" / "images" / "titles_manifest.csv")
    assert [r["seq"] for r in manifest] == ["1", "2"]
    assert [r["seed"] for r in manifest] == ["5", str(derive_seed(5, "run", 1))]
    assert len(list((tmp_path / "out" / "logs").glob("*_transcript.json"))) == 2
    assert capsys.readouterr().out.count("Generation ") == 2


def test_unloadable_caption_font_exits_2_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_font = tmp_path / "not_a_font.ttf"
    bad_font.write_text("definitely not a font", encoding="utf-8")
    config = write_config(tmp_path)
    code = main(
        ["--config", str(config), "--set", f"image.caption_font_path={bad_font}"], env={}, root=REPO
    )
    assert code == 2
    assert "not_a_font.ttf" in capsys.readouterr().err
    assert not (tmp_path / "out" / "logs").exists()


def test_offline_scoring_run_shows_the_selection_and_uses_history(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    args = [
        "--config",
        str(config),
        "--set",
        "prompt.scoring.enabled=true",
        "--set",
        "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]",
    ]
    first = run_main(tmp_path, *args, "--seed", "11")
    assert first.returncode == 0, first.stderr
    assert "OFFLINE" in first.stdout
    # The one warn-and-continue: no history yet.
    assert "Novelty enabled but history unavailable" in first.stderr
    assert str(tmp_path / "out" / "generations.csv") in first.stderr
    logs = tmp_path / "out" / "logs"
    (t_path,) = logs.glob("*_transcript.json")
    bbs = json.loads(t_path.read_text(encoding="utf-8"))["blackbox_scoring"]
    selected = bbs["selected_id"]
    assert (
        f"Selected    idea {selected}: median(rz) {bbs['selected_score']}, {bbs['selection_mode']}"
        in first.stdout
    )
    header = next(line for line in first.stdout.splitlines() if line.startswith("  Scores"))
    assert header.split()[1:5] == ["card", "strict", "warm", "novel"]
    rows = [
        line.split()
        for line in first.stdout.splitlines()
        if line.startswith("              ") and line.split()[0] in "ABCDEF"
    ]
    assert [r[0] for r in rows] == list("ABCDEF")
    assert [r[0] for r in rows if r[-1] == "<"] == [selected]
    panel = [
        line.split()
        for line in first.stdout.splitlines()
        if "  rubric " in line and " profile " in line
    ]
    assert [p[-9:] for p in panel] == [
        [j, "ok", "rubric", "default", "profile", "raw", "weight", "1", "offline-text-1"]
        for j in ("strict", "warm", "novel")
    ]
    assert "  Novelty     off" in first.stdout

    second = run_main(tmp_path, *args, "--seed", "12")
    assert second.returncode == 0, second.stderr
    assert "history unavailable" not in second.stderr
    assert "  Novelty     on (1 recent prompt," in second.stdout
    assert len(read_csv(tmp_path / "out" / "generations.csv")) == 2

    # A batch reads the history once: every run's summary shows the same novelty.
    batch = run_main(tmp_path, *args, "--seed", "13", "--runs", "3")
    assert batch.returncode == 0, batch.stderr
    novelty = [line for line in batch.stdout.splitlines() if line.startswith("  Novelty")]
    assert len(novelty) == 3 and len(set(novelty)) == 1, novelty
    assert novelty[0].startswith("  Novelty     on (2 recent prompts,")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "generate"),
        (["--seed", "3"], "generate"),
        (["-q"], "generate"),
        (["generate", "--seed", "3"], "generate"),
    ],
)
def test_no_subcommand_means_generate(argv: list[str], expected: str) -> None:
    args = build_parser().parse_args(_with_command(argv))
    assert args.command == expected
    assert args.seed == (3 if "--seed" in argv else None)


def test_top_level_help_lists_generate_and_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"], env={}, root=REPO, prog="python -m image_project")
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m image_project [generate] [options]\n")
    assert "generate" in out.split("commands:")[1] and "--prompt-only" in out


def test_generate_help_and_errors_name_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--help"], env={}, root=REPO, prog="python main.py")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python main.py generate [-h]")
    with pytest.raises(SystemExit) as exit_:
        main(["generat"], env={}, root=REPO)
    assert exit_.value.code == 2
    assert "image-project: error: unknown command 'generat'; did you mean 'generate'?" in (
        capsys.readouterr().err
    )
    # Options go after the subcommand: before it they mean `generate` already.
    with pytest.raises(SystemExit) as exit_:
        main(["--seed", "3", "generate"], env={}, root=REPO)
    assert exit_.value.code == 2
    assert "image-project: error: unrecognized arguments: generate" in (capsys.readouterr().err)


def test_the_example_panel_runs_offline_with_three_rubrics_that_disagree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "--config",
            str(REPO / "config" / "scoring_ensemble.example.yaml"),
            "--seed",
            "42",
            "--set",
            f"image.log_path={out / 'logs'}",
            "--set",
            f"image.generation_path={out / 'images'}",
            "--set",
            f"prompt.generations_path={out / 'generations.csv'}",
        ],
        env={},
        root=REPO,
    )
    stdout = capsys.readouterr().out
    assert code == 0
    panel = [line.split()[-9:] for line in stdout.splitlines() if "  rubric " in line]
    assert [(p[0], p[3]) for p in panel] == [
        ("strict", "strict"),
        ("warm", "profile_fit"),
        ("novel", "novelty_heavy"),
    ]
    (t_path,) = (out / "logs").glob("*_transcript.json")
    judges = json.loads(t_path.read_text(encoding="utf-8"))["blackbox_scoring"]["judges"]
    rankings = {
        j["id"]: tuple(sorted(j["scores"], key=lambda i: (-j["scores"][i], i))) for j in judges
    }
    assert len(set(rankings.values())) > 1, rankings  # the panel disagrees


def test_version_prints_the_installed_distributions_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"], env={}, root=REPO)
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"image_project {version('image_project')}\n"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["genrate"], "image-project: error: unknown command 'genrate'; did you mean 'generate'?"),
        (["reveiw"], "unknown command 'reveiw'; did you mean 'review'?"),
        (["runs", "lst"], "image-project runs: error: unknown action 'lst'; did you mean 'list'?"),
        (["campaign", "sumbit"], "unknown action 'sumbit'; did you mean 'submit'?"),
        (["frobnicate"], "unknown command 'frobnicate'; choose from generate, runs, review,"),
    ],
)
def test_a_mistyped_command_is_a_usage_error_naming_the_nearest(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv, env={}, root=REPO)
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def _commands() -> list[str]:
    from image_project.cli.command import _EXAMPLES

    return sorted(_EXAMPLES)


@pytest.mark.parametrize("command", _commands())
def test_every_commands_help_shows_examples_that_parse(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each example of a command's ``--help`` is one its parser accepts (parsed, not run)."""
    import shlex

    from image_project.cli.command import _EXAMPLES, _with_command, build_parser

    words = [] if command == "generate" else command.split()
    with pytest.raises(SystemExit) as exit_:
        main([*words, "--help"], env={}, root=REPO, prog="python -m image_project")
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    examples = help_text.split("\nexamples:\n", 1)[1].splitlines()
    assert examples == [f"  python -m image_project {e}" for e in _EXAMPLES[command]]
    for example in _EXAMPLES[command]:
        build_parser().parse_args(_with_command(shlex.split(example)))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--runs", "0"], "configuration error: --runs: got 0, must be an int in 1..1000"),
        (["--set", "run.runs=0"], "configuration error: run.runs: got 0, must be an int"),
        (["--set", "run.runs=3", "--runs", "0"], "configuration error: --runs: got 0,"),
        (["--parallel", "5000"], "configuration error: --parallel: got 5000, must be 'auto'"),
        (["--seed", "-3"], "configuration error: --seed: got -3, must be an int in 0.."),
        (["--date", "1800-01-01"], "configuration error: --date: got '1800-01-01', must be"),
        (["--runs", "0", "--parallel", "5000"], "\n  --parallel: got 5000"),
    ],
)
def test_a_bad_options_value_is_named_by_the_option(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--offline", *argv], env={}, root=tmp_path)
    assert code == 2
    err = capsys.readouterr().err
    assert says in err
    assert not (tmp_path / "output").exists()
