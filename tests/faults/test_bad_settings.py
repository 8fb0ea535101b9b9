"""Settings a model would reject, and the smaller command-line faults (a ``--set`` without
``=``, a config that is a directory, on/off and floats where a bool or an int belongs, the
caption font, the closing count of several runs, ``--prompt-only``'s output).

The model cases run the CLI in-process against a local OpenAI-compatible server (through the
real adapter) and assert exit 2, a message naming the key and the allowed values, and that
no request reached the server and no run started (no log directory). The capability table's
own tests are in ``tests/test_model_capabilities.py``.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from image_project.cli.command import main
from image_project.config import capabilities
from image_project.config.loading import load_config
from tests.faults import common
from tests.faults.common import transcripts
from tests.support.openai_server import OpenAIServer, Reply

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fixed_today(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's dates as of the day it was made, whatever the clock says."""
    monkeypatch.setattr(capabilities, "_today", lambda: date(2026, 11, 23))


def config_for(tmp: Path, server: OpenAIServer, **sections: dict[str, Any]) -> Path:
    """The shared fault config, with the model settings under test (the default models
    unless ``sections`` name others) and one attempt per call."""
    backend = {"max_attempts": 1, **sections.pop("backend", {})}
    path = common.write_config(tmp, base_url=server.base_url, backend=backend, **sections)
    data = json.loads(path.read_text(encoding="utf-8"))
    image = sections.get("image", {})
    data["image"]["model"] = image.get("model", "gpt-image-2.6-sunburst")
    data["image"]["size"] = image.get("size", "1536x1024")
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args, env={}, root=REPO)
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- model settings


@pytest.mark.parametrize(
    ("image", "key", "allowed"),
    [
        pytest.param(
            {"size": "1000x1000"},
            "image.size",
            "each side a multiple of 16 and at most 3840",
            id="not_a_multiple_of_16",
        ),
        pytest.param(
            {"size": "3072x768"},
            "image.size",
            "the long side at most 3 times the short one",
            id="more_than_3_to_1",
        ),
        pytest.param(
            {"size": "3904x1600"}, "image.size", "above the maximum 3840", id="above_max_edge"
        ),
        pytest.param(
            {"size": "3840x2400"},
            "image.size",
            "above the maximum 8,294,400",
            id="above_max_pixels",
        ),
        pytest.param(
            {"size": "512x512"}, "image.size", "below the minimum 655,360", id="below_min_pixels"
        ),
        pytest.param(
            {"model": "gpt-image-2", "quality": "xhigh"},
            "image.quality",
            "one of 'low', 'medium', 'high', 'auto'",
            id="quality_not_offered",
        ),
        pytest.param(
            {"model": "gpt-image-1.5", "size": "1792x1024"},
            "image.size",
            "one of '1024x1024', '1536x1024', '1024x1536', 'auto'",
            id="size_not_in_a_fixed_list",
        ),
        pytest.param(
            {"model": "gpt-image-1"},
            "image.model",
            "shut down on 2026-10-23; OpenAI recommends gpt-image-2.6-sunburst",
            id="shut_down_model",
        ),
    ],
)
def test_bad_image_settings_exit_2_before_any_call(
    image: dict[str, str],
    key: str,
    allowed: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    allow_loopback: None,
) -> None:
    with OpenAIServer(offline=True) as server:
        config = config_for(tmp_path, server, image=image)
        code, _, err = run_cli(["--config", str(config)], capsys)
        assert server.requests == []
    assert code == 2
    (line,) = [ln for ln in err.splitlines() if ln.startswith("configuration error: ")]
    assert line.startswith(f"configuration error: {key}: got ")
    assert allowed in line
    assert not (tmp_path / "out").exists()


def test_a_judge_at_temperature_0_on_a_model_that_cannot_honour_it_exits_2_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    judges = [{"id": "fair"}, {"id": "strict", "model": "gpt-6.1-sol", "temperature": 0}]
    with OpenAIServer(offline=True) as server:
        config = config_for(
            tmp_path, server, prompt={"scoring": {"enabled": True, "judges": judges}}
        )
        code, _, err = run_cli(["--config", str(config)], capsys)
        assert server.requests == []
    assert code == 2
    assert "configuration error: prompt.scoring.judges[1].model: got 'gpt-6.1-sol'" in err
    assert "cannot honour temperature 0 for judge 'strict'" in err


def test_a_shut_down_text_model_exits_2_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        config = config_for(tmp_path, server, backend={"text_model": "gpt-4.1-nano"})
        code, _, err = run_cli(["--config", str(config)], capsys)
        assert server.requests == []
    assert code == 2
    assert "backend.text_model: got 'gpt-4.1-nano', which OpenAI shut down on 2026-10-23" in err


def test_the_default_text_model_gets_reasoning_off_on_every_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        config = config_for(tmp_path, server)
        code, _, err = run_cli(["--config", str(config), "--prompt-only", "-q"], capsys)
        bodies = server.request_bodies
    assert code == 0, err
    assert len(bodies) > 5
    assert {b["model"] for b in bodies} == {"gpt-6-luna"}
    assert {b["reasoning_effort"] for b in bodies} == {"none"}
    assert all("temperature" in b for b in bodies)
    assert "MODEL SHUTDOWN AHEAD" not in err


def test_a_model_scheduled_to_shut_down_is_warned_about_and_still_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        config = config_for(tmp_path, server, backend={"text_model": "gpt-4.1-mini"})
        code, _, err = run_cli(["--config", str(config), "--prompt-only"], capsys)
        bodies = server.request_bodies
    assert code == 0, err
    assert "backend.text_model: 'gpt-4.1-mini' is scheduled to shut down on 2027-01-14" in err
    assert "OpenAI recommends gpt-6-luna" in err
    assert {b["model"] for b in bodies} == {"gpt-4.1-mini"}
    assert not any("reasoning_effort" in b for b in bodies)


@pytest.mark.parametrize("size", ["96x288", "100x100", "1000x1000"])
def test_the_offline_image_model_keeps_working_with_sizes_the_api_would_refuse(
    size: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = common.write_config(tmp_path, image={"size": size})
    code, _, err = run_cli(["--config", str(config), "--seed", "4", "-q"], capsys)
    assert code == 0, err
    (image,) = common.images(tmp_path)
    with Image.open(image) as saved:
        assert saved.size == tuple(int(side) for side in size.split("x"))


# --------------------------------------------------------------------------- smaller items


def test_set_without_equals_suggests_a_valid_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = common.write_config(tmp_path)
    code, _, err = run_cli(["--config", str(config), "--set", "nokeyvalue"], capsys)
    assert code == 2
    assert "expected dotted.key=value, like run.runs=3" in err
    # The suggestion is itself valid.
    assert (
        load_config(root=REPO, config_path=config, overrides=["run.runs=3"], env={}).run.runs == 3
    )


def test_config_that_is_a_directory_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "config.yaml").write_text("{}", encoding="utf-8")
    code, _, err = run_cli(["--config", str(folder)], capsys)
    assert code == 2
    assert f"config path {folder} is a directory" in err
    assert f"like {folder / 'config.yaml'}" in err
    assert "not found" not in err


@pytest.mark.parametrize(
    ("override", "shown"),
    [
        ("prompt.scoring.enabled=on", "'on'"),
        ("prompt.scoring.novelty.enabled=off", "'off'"),
        ("backend.structured_outputs=OFF", "'OFF'"),
    ],
)
def test_on_and_off_are_not_booleans(
    override: str, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = common.write_config(tmp_path)
    code, _, err = run_cli(["--config", str(config), "--set", override], capsys)
    assert code == 2
    key = override.partition("=")[0]
    assert f"configuration error: {key}: got {shown}, must be true or false" in err


def test_a_float_is_not_an_int(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = common.write_config(tmp_path)
    code, _, err = run_cli(["--config", str(config), "--set", "run.runs=4.0"], capsys)
    assert code == 2
    assert "run.runs: got 4.0, must be an int in 1..1000 (a float is not an int; write 4)" in err


def test_the_caption_font_error_says_each_thing_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "not_a_font.ttf"
    bad.write_text("definitely not a font", encoding="utf-8")
    missing = tmp_path / "missing.ttf"
    config = common.write_config(tmp_path)
    for font, reason in ((bad, ""), (missing, "no such file")):
        code, _, err = run_cli(
            ["--config", str(config), "--set", f"image.caption_font_path={font}"], capsys
        )
        assert code == 2
        assert err.count(str(font)) == 1, err
        assert err.count("image.caption_font_path") == 1, err
        assert err.startswith(
            f"input file error: {font}: image.caption_font_path cannot be loaded as a "
            f"TrueType/OpenType font ({reason}"  # then Pillow's reason for a bad file
        )


def test_several_runs_end_with_how_many_succeeded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = common.write_config(tmp_path, image={"size": "64x64"})
    code, out, _ = run_cli(["--config", str(config), "--runs", "3", "--prompt-only"], capsys)
    assert code == 0
    assert out.rstrip().splitlines()[-1] == "3 of 3 succeeded"


def test_several_runs_with_a_failure_say_which_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        server.script(Reply(status=400))  # the first call of run 1
        config = common.write_config(
            tmp_path, base_url=server.base_url, backend={"max_attempts": 1}
        )
        code, out, err = run_cli(
            ["--config", str(config), "--runs", "3", "--prompt-only", "-q"], capsys
        )
    assert code == 1
    assert out.rstrip().splitlines()[-1] == "2 of 3 succeeded (run 1 failed; its error is above)"
    assert err.count("error: run failed") == 1


def test_a_single_run_has_no_closing_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = common.write_config(tmp_path)
    code, out, _ = run_cli(["--config", str(config), "--prompt-only"], capsys)
    assert code == 0
    assert "succeeded" not in out


def test_prompt_only_shows_the_whole_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = common.write_config(tmp_path)
    code, out, _ = run_cli(["--config", str(config), "--prompt-only", "--seed", "9"], capsys)
    assert code == 0
    (record,) = transcripts(tmp_path)
    prompt = record["final_image_prompt"]
    lines = [line.strip() for line in prompt.splitlines() if line.strip()]
    assert len(" ".join(lines)) > 100  # long enough that the old summary cut it
    shown = out.split("  Prompt      ", 1)[1].splitlines()[: len(lines)]
    assert [line.strip() for line in shown] == lines
    assert "…" not in out.split("  Prompt      ", 1)[1].split("  Transcript")[0]
