"""The bound on a request's size (``prompt.max_prompt_chars``): a request longer than it is
never sent; its step fails naming the key and the step path, and the run records it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.runner import ChatRunner
from image_project.errors import PromptTooLongError
from image_project.testing import ScriptedTextBackend

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio


async def test_a_request_over_the_bound_is_not_sent_and_one_within_it_is() -> None:
    backend = ScriptedTextBackend(["fine"])
    ctx = Context.with_system("s" * 100)
    runner = ChatRunner(backend, max_prompt_chars=1_000)
    await runner.root(ctx).ask(ChatStep(name="short", prompt="p" * 800, temperature=0.0))
    with pytest.raises(PromptTooLongError) as info:
        await runner.root(ctx).ask(ChatStep(name="long", prompt="p" * 1_000, temperature=0.0))
    assert "long: the request would be" in str(info.value)
    assert "more than prompt.max_prompt_chars (1,000)" in str(info.value)
    assert len(backend.requests) == 1  # only the short one went out


def test_the_cli_fails_the_run_naming_the_key_with_no_call_over_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    args = [
        "--offline",
        "--prompt-only",
        "--seed",
        "1",
        "--set",
        "prompt.max_prompt_chars=1000",
        "--set",
        f"image.log_path={logs}",
        "--set",
        f"prompt.generations_path={tmp_path / 'g.csv'}",
    ]
    assert cli.main(args, env={}, root=REPO) == 1
    assert "prompt.max_prompt_chars (1,000)" in capsys.readouterr().err
    (transcript,) = logs.glob("*_transcript.json")
    record = json.loads(transcript.read_text(encoding="utf-8"))
    error = record["error"]
    assert (error["type"], error["path"]) == ("PromptTooLongError", "pipeline/initial_prompt/draft")
    # The short concept rewrite went out; the first pipeline request, over the bound, did not.
    assert [s["path"] for s in record["steps"]] == ["dislike_rewrite"]
    assert record["usage"]["model_calls"] == 1
