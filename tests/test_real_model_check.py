"""scripts/real-model-check without llama-server: its recording proxy (in front of the
in-process StrictLocalServer), the config-key filter that lets it run an older checkout, and
how it reads transcripts and judges a run."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from image_project.backends.offline.text import OfflineTextBackend
from image_project.run.driver import run_generation
from image_project.testing import FunctionTextBackend, StrictLocalServer
from tests.test_app import backends, make_cfg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import real_model_check  # noqa: E402
import real_model_io  # noqa: E402
import real_model_report  # noqa: E402


def client(proxy: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key="x", max_retries=0)


def test_the_proxy_records_status_roles_limit_and_finish() -> None:
    with StrictLocalServer(cap_tokens=30) as server:
        proxy = real_model_io.Proxy(server.port)
        try:
            proxy.label = "t/run"
            c = client(proxy)
            c.chat.completions.create(
                model="m",
                messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            )
            with pytest.raises(openai.BadRequestError):
                c.chat.completions.create(
                    model="m",
                    messages=[
                        {"role": "system", "content": "s"},
                        {"role": "assistant", "content": "a"},
                        {"role": "user", "content": "u"},
                    ],
                    max_completion_tokens=5,
                )
            c.models.list()
            summary = real_model_report.proxy_summary(proxy.for_run("t/run"))
        finally:
            c.close()
            proxy.stop()
    assert summary["http"] == {"200": 2, "400": 1}
    assert summary["shapes"] == {"s,u": 1, "s,a,u": 1}
    assert summary["no_token_limit"] == 1
    assert summary["finish"] == {"length": 1}
    assert summary["client_gone"] == 0
    assert "Conversation roles must alternate" in summary["http_400"][0]


def test_a_body_cut_by_a_client_that_hung_up_is_not_sent_upstream() -> None:
    """A call cancelled while it sent its body reaches the proxy with less than its
    Content-Length: recorded as gone, never forwarded (llama-server would answer 400)."""
    with StrictLocalServer() as server:
        proxy = real_model_io.Proxy(server.port)
        try:
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
                sock.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                    b'{"model": "m"'
                )
                sock.shutdown(socket.SHUT_WR)
                assert sock.recv(1) == b""  # the proxy closes without an answer
        finally:
            proxy.stop()
    assert server.chat_requests == []
    (rec,) = proxy.records
    assert rec["client_gone"] is True and rec["status"] is None and rec["body_cut"] is True


def test_the_proxy_token_limit_is_added_only_where_none_was_sent() -> None:
    with StrictLocalServer() as server:
        proxy = real_model_io.Proxy(server.port, token_limit=4)
        try:
            c = client(proxy)
            msgs: Any = [{"role": "user", "content": "u"}]
            c.chat.completions.create(model="m", messages=msgs)
            c.chat.completions.create(model="m", messages=msgs, max_tokens=200)
        finally:
            c.close()
            proxy.stop()
    assert [r.token_limit for r in server.chat_requests] == [4, 200]
    assert [r.get("token_limit_added") for r in proxy.records] == [4, None]


def test_keys_the_checkout_lacks_are_not_set() -> None:
    keys = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    sets, not_set = real_model_check.overlays_for(
        keys,
        {"backend.timeout_s": 30, "backend.no_such_key": 1},
        {"prompt.scoring.evolution.selector": "llm", "backend.timeout_s": 45},
    )
    assert sets == {"backend.timeout_s": 45, "prompt.scoring.evolution.selector": "llm"}
    assert not_set == ["backend.no_such_key"]


def test_every_run_overlay_names_keys_of_this_checkout() -> None:
    """A typo in the tables at the top of the script would silently not be set."""
    keys = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    pending = {
        k
        for k in real_model_check.COMMON
        if k.startswith(("backend.max_output_tokens", "backend.schema_dialect"))
    }
    pending.add("image.backend")
    overlays = [
        real_model_check.COMMON,
        {"backend.text_model": "m", "backend.timeout_s": 60.0},  # set per server
    ]
    overlays += [r.overlay for r in real_model_check.RUNS]
    unknown = {k for o in overlays for k in o if not real_model_check.has_key(keys, k)} - pending
    assert unknown == set()


@pytest.mark.parametrize(
    ("reask", "reason"),
    [
        ({"error": "cut_off: the answer was cut off at the server's token limit"}, "cut_off"),
        (
            {"error": "pipeline/x/idea_A: no {...} found in the answer (got 'x')"},
            "no {...} found in the answer",
        ),
        ({"error": "2 validation errors for IdeaCard\nhook"}, "N validation errors for IdeaCard"),
        ({"error": "anything", "reason": "degenerate"}, "degenerate"),
        (
            {"error": "gate:judge_degenerate: the scores [0, 1, 2] are the cards' positions"},
            "gate:judge_degenerate",
        ),
    ],
)
def test_reask_reasons_are_counted_by_their_code_or_their_first_words(
    reask: dict[str, str], reason: str
) -> None:
    assert real_model_report.reask_reason(reask) == reason


@pytest.mark.anyio
async def test_statuses_are_counted_from_a_real_multi_round_transcript(tmp_path: Path) -> None:
    cfg = make_cfg(
        tmp_path,
        "run.mode=prompt_only",
        "prompt.refinement=none",
        "prompt.scoring.enabled=true",
        "prompt.scoring.num_ideas=3",
        "prompt.scoring.evolution.enabled=true",
        "prompt.scoring.evolution.generations=1",
        "prompt.scoring.evolution.survivors=2",
        "prompt.scoring.evolution.variants_per_survivor=1",
        "prompt.scoring.evolution.selector=llm",
    )
    await run_generation(cfg, backends(FunctionTextBackend(OfflineTextBackend().complete)))
    (path,) = (tmp_path / "logs").glob("*_transcript.json")
    summary = real_model_report.summarize_transcript(json.loads(path.read_text(encoding="utf-8")))
    # one judge per round (two rounds; the top-level copy of the last round is not counted
    # twice) and one selector between them
    assert summary["statuses"] == {"judge:ok": 2, "selector:llm-ok": 1}
    assert summary["error"] is None and summary["reasks"] == {}
    # dislike rewrite, hints, 3 ideas, judge, selector, 2 variants, judge, 2 prompt drafts
    assert summary["calls"] == 12


def row(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "exit": 0,
        "hang": False,
        "cap_s": 420.0,
        "traceback": False,
        "sets": {},
        "transcript": {"transcript": True, "error": None, "timeouts_recorded": 0},
        "proxy": {"http": {"200": 3}, "http_400": [], "client_gone": 0, "image_endpoint": 0},
        "server_log": {"exceptions": 0, "grammar_errors": [], "exception_lines": []},
    }
    base.update(over)
    return base


def test_calls_cancelled_when_the_run_stopped_are_not_timeouts() -> None:
    """The client also hangs up on the calls in flight when a sibling fails the run; only a
    hang-up at the timeout counts as one."""
    proxy = {
        "http": {"200": 2, "gone": 2},
        "http_400": [],
        "client_gone": 2,
        "client_gone_s": [3.1, 12.5],
        "image_endpoint": 0,
    }
    failed = {"transcript": True, "error": {"path": "pipeline/x", "type": "ModelOutputError"}}
    sets = {"backend.timeout_s": 90.0}
    assert (
        real_model_report.problems_of(row(exit=1, transcript=failed, proxy=proxy, sets=sets)) == []
    )


def test_a_clean_run_and_a_named_failure_pass() -> None:
    assert real_model_report.problems_of(row()) == []
    failed = {"transcript": True, "error": {"path": "pipeline/x", "type": "ModelOutputError"}}
    assert real_model_report.problems_of(row(exit=1, transcript=failed)) == []


@pytest.mark.parametrize(
    ("over", "problem"),
    [
        ({"hang": True, "exit": None}, "no exit within 420 s"),
        ({"exit": 2}, "exit 2"),
        ({"exit": 1, "transcript": {"transcript": False}}, "exit 1 without a transcript"),
        ({"exit": 1, "transcript": {"transcript": True, "error": {"type": "X"}}}, "names no step"),
        ({"traceback": True}, "a traceback on stderr"),
        (
            {
                "proxy": {
                    "http": {"400": 1},
                    "http_400": ["roles"],
                    "client_gone": 0,
                    "image_endpoint": 0,
                }
            },
            "1 HTTP 400",
        ),
        (
            {
                "sets": {"backend.timeout_s": 90.0},
                "proxy": {
                    "http": {"gone": 1},
                    "http_400": [],
                    "client_gone": 1,
                    "client_gone_s": [90.02],
                    "image_endpoint": 0,
                },
            },
            "reached the timeout",
        ),
        (
            {
                "server_log": {
                    "exceptions": 0,
                    "grammar_errors": ["E grammar"],
                    "exception_lines": [],
                }
            },
            "grammar error",
        ),
        (
            {
                "sets": {"image.backend": "offline"},
                "proxy": {
                    "http": {"404": 1},
                    "http_400": [],
                    "client_gone": 0,
                    "image_endpoint": 1,
                },
            },
            "image endpoint was called",
        ),
    ],
)
def test_each_broken_assertion_is_named(over: dict[str, Any], problem: str) -> None:
    problems = real_model_report.problems_of(row(**over))
    assert len(problems) == 1 and problem in problems[0]


def test_without_the_binary_it_skips_with_exit_0(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("LLAMA_SERVER", str(tmp_path / "no-llama-server"))
    assert real_model_check.main(["--json", str(tmp_path / "out.json")]) == 0
    assert "SKIPPED: no llama-server binary at" in capsys.readouterr().out
    assert not (tmp_path / "out.json").exists()


def test_a_full_run_against_a_text_only_server_must_be_refused_before_any_call() -> None:
    def refused(exit_: int, chat: int) -> list[str]:
        proxy = {"http": {}, "http_400": [], "client_gone": 0, "image_endpoint": 0}
        proxy["chat_requests"] = chat
        return list(
            real_model_report.problems_of(row(exit=exit_, refused_before_calls=True, proxy=proxy))
        )

    assert refused(2, 0) == []
    (problem,) = refused(1, 3)
    assert "exit 1 after 3 chat request(s); expected exit 2 before any" in problem
    assert len(refused(2, 1)) == 1


# -- what the check derives from the server it measured --------------------------------------

GEMMA_RENDERED = (
    "<start_of_turn>user\nBe brief, zebra-7c1.\n\nName a colour, walrus-4d2.<end_of_turn>\n"
)


def test_a_server_that_renders_the_word_gemma_fails_loudly() -> None:
    """Jinja on and ``--chat-template gemma``: /apply-template gives {"prompt": "gemma"} and
    every request costs 3 prompt tokens; the check says so instead of measuring it."""
    bad = {"rendered": "gemma", "rendered_tokens": 1, "has_conversation": False}
    problem = real_model_check.rendering_problem(bad, {"prompt_tokens": 3})
    assert problem is not None and "does not render the conversation" in problem
    good = {"rendered": GEMMA_RENDERED, "rendered_tokens": 24, "has_conversation": True}
    assert real_model_check.rendering_problem(good, {"prompt_tokens": 25}) is None
    wrong_count = real_model_check.rendering_problem(good, {"prompt_tokens": 3})
    assert wrong_count is not None and "3 prompt tokens" in wrong_count


def test_the_lenient_template_turns_jinja_off() -> None:
    lenient = real_model_io.MODELS["base"].templates["lenient"]
    assert lenient[:1] == ["--no-jinja"] and lenient[-2:] == ["--chat-template", "gemma"]
    assert real_model_io.MODELS["instruct"].templates == {"own": ["--jinja"]}


def test_a_row_whose_prompts_were_not_rendered_is_a_problem() -> None:
    records = [
        {"run": "r", "method": "POST", "path": "/v1/chat/completions", "roles": ["system", "user"],
         "message_chars": 2400, "status": 200, "client_gone": False, "seconds": 1.0,
         "usage": {"prompt_tokens": 3}, "finish_reason": "length"},
    ]  # fmt: skip
    summary = real_model_report.proxy_summary(records)
    assert summary["prompt_not_rendered"] == ["3 tokens for 2400 chars"]
    row = {
        "proxy": summary,
        "transcript": {},
        "server_log": {"exceptions": 0, "grammar_errors": []},
        "sets": {"backend.timeout_s": 60.0},
    }
    assert any("do not match the conversation" in p for p in real_model_report.wire_problems(row))
    records[0]["usage"] = {"prompt_tokens": 610}
    assert real_model_report.proxy_summary(records)["prompt_not_rendered"] == []


@pytest.mark.parametrize(
    ("decode", "timeout"),
    [(30.0, 144.0), (20.0, 171.0), (3.5, 548.0), (0.6, 2757.0)],
)
def test_timeouts_come_from_the_measured_speed(decode: float, timeout: float) -> None:
    """The largest limit (a judge of 6 cards: 60 + 6 * 40 = 300, under the card's 400) at the
    measured decoding speed shared by the 4 slots (batched: twice the speed of one answer),
    plus a 1,700-token prompt at the prompt speed the 4 slots share too, twice over."""
    sets, _ = real_model_check.overlays_for(
        {"backend": {"max_output_tokens": {"card": 1, "judge_base": 1, "judge_per_card": 1}}},
        real_model_check.COMMON,
    )
    assert real_model_check.largest_limit(sets) == 400
    derived = real_model_check.timeouts_for({"decode_tok_s": decode, "prompt_tok_s": 150.0}, 400)
    assert derived is not None
    assert derived[0] == pytest.approx(timeout, abs=1.0)
    assert derived[1] >= 10 * derived[0]
    assert real_model_check.timeouts_for({"error": "x"}, 400) is None


def test_a_server_too_slow_for_the_budget_is_skipped_not_failed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ctx = real_model_check.Context(
        binary=Path("x"),
        code=REPO,
        keys={},
        runs=[],
        tmp=Path("x"),
        args=real_model_check.parse_args([]),
        started=0.0,
        seeds=[24],
        threads=1,
        servers={"instruct/own": {"too_slow": "decodes 0.6 tokens/s"}},
    )
    assert real_model_check.verdict(ctx, [], failed=False, interrupted=False) == 0
    out = capsys.readouterr().out
    assert "SKIPPED (too slow, not a code failure): instruct/own decodes 0.6 tokens/s" in out
    assert real_model_check.verdict(ctx, ["base/lenient: not rendered"], True, False) == 1


def test_a_run_stopped_at_the_budget_is_no_failure() -> None:
    row = {"over_budget": True, "hang": False, "exit": None, "traceback": False,
           "transcript": {}, "proxy": {"chat_requests": 3}, "cap_s": 60.0}  # fmt: skip
    assert real_model_report.exit_problems(row) == []
    assert real_model_report.exit_problems({**row, "over_budget": False, "hang": True}) != []


def test_a_must_pass_run_needs_exit_0_and_two_ok_judges_in_every_round() -> None:
    failed = {"transcript": True, "error": {"path": "pipeline/x", "type": "ModelOutputError"}}
    must = {"must_pass": True, "scoring": True}
    assert real_model_report.problems_of(row(exit=1, transcript=failed)) == []
    problems = real_model_report.problems_of(row(exit=1, transcript=failed, **must))
    assert any("must exit 0" in p for p in problems)
    clean = {"transcript": True, "error": None, "timeouts_recorded": 0, "ok_judges": [3, 1]}
    (problem,) = real_model_report.problems_of(row(transcript=clean, **must))
    assert "ok judges per round [3, 1]" in problem
    clean["ok_judges"] = [2, 3]
    assert real_model_report.problems_of(row(transcript=clean, **must)) == []
    # a prompt-only run without scoring needs exit 0 only
    assert real_model_report.problems_of(row(must_pass=True, scoring=False)) == []


@pytest.mark.anyio
async def test_ok_judges_picks_and_digests_come_from_a_real_multi_round_transcript(
    tmp_path: Path,
) -> None:
    async def once(where: Path) -> dict[str, Any]:
        cfg = make_cfg(
            where,
            "run.mode=prompt_only",
            "prompt.refinement=none",
            "prompt.scoring.enabled=true",
            "prompt.scoring.num_ideas=3",
            "prompt.scoring.judges=[{id: a}, {id: b, rubric: strict}]",
            "prompt.scoring.evolution.enabled=true",
            "prompt.scoring.evolution.generations=1",
            "prompt.scoring.evolution.selector=llm",
        )
        await run_generation(cfg, backends(FunctionTextBackend(OfflineTextBackend().complete)))
        (path,) = (where / "logs").glob("*_transcript.json")
        summary = real_model_report.summarize_transcript(json.loads(path.read_text("utf-8")))
        return {"run": "r", "exit": 0, "transcript": summary, "proxy": {"bodies": ["x", "y"]}}

    first, again = await once(tmp_path / "1"), await once(tmp_path / "2")
    assert first["transcript"]["ok_judges"] == [2, 2]
    picks = first["transcript"]["picks"]
    assert picks["selected_id"] and len(picks["survivors"]) == 2
    compared = real_model_report.compare_runs(first, {**again, "run": "r-repeat"})
    n = compared["steps_in_both"]
    assert n == len(first["transcript"]["digests"]) > 5
    assert compared["requests_equal"] == compared["answers_equal"] == n
    assert compared["picks_equal"] and compared["bodies_equal"] == 2
    assert compared["first_answer_differing"] is None
    path = next(iter(again["transcript"]["digests"]))
    again["transcript"]["digests"][path] = ["other", "other"]
    compared = real_model_report.compare_runs(first, again)
    assert compared["requests_equal"] == n - 1 and compared["first_answer_differing"] == path
    assert "picks equal" in real_model_report.comparison_lines(compared)[0]


def test_the_instruct_model_runs_first_and_the_repeat_last() -> None:
    args = real_model_check.parse_args([])
    assert args.models.split(",")[0] == "instruct"
    ctx = real_model_check.Context(
        binary=Path("x"),
        code=REPO,
        keys={},
        runs=[r for r in real_model_check.RUNS if r.name in args.runs.split(",")],
        tmp=Path("x"),
        args=args,
        started=0.0,
        seeds=[24],
        threads=1,
    )
    instruct = real_model_check.runs_for(ctx, real_model_io.MODELS["instruct"], "own")
    names = [(spec.name, repeat) for spec, repeat in instruct]
    assert names == [
        ("full-text-only-refused", False),
        ("standard", False),
        ("scoring-3-judges", False),
        ("llm-selector-2-rounds", False),
        ("scoring-3-judges", True),
    ]
    assert instruct[0][0].refused_before_calls and not instruct[0][0].must_pass
    assert all(spec.must_pass == ("instruct",) for spec, _ in instruct[1:])
    base = real_model_io.MODELS["base"]
    for template in ("lenient", "strict"):
        runs = real_model_check.runs_for(ctx, base, template)
        assert [spec.name for spec, _ in runs] == ["standard"]
    judges = real_model_check.SCORING["prompt.scoring.judges"]
    assert len(judges) == 3 and {j["protocol"] for j in judges} == {"logprobs"}


def _context(**over: Any) -> Any:
    args = real_model_check.parse_args([])
    fields: dict[str, Any] = {
        "binary": Path("x"),
        "code": REPO,
        "keys": {},
        "runs": [r for r in real_model_check.RUNS if r.name in args.runs.split(",")],
        "tmp": Path("x"),
        "args": args,
        "started": 0.0,
        "seeds": [24],
        "threads": 1,
    }
    return real_model_check.Context(**{**fields, **over})


def test_the_base_model_runs_the_standard_run_with_each_template() -> None:
    ctx = _context()
    base = real_model_io.MODELS["base"]
    assert set(base.templates) == {"lenient", "strict"}
    for template in base.templates:
        runs = real_model_check.runs_for(ctx, base, template)
        assert [(spec.name, repeat) for spec, repeat in runs] == [("standard", False)]


def test_a_broken_must_is_an_assertion_failed_line_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failed = {"transcript": True, "error": {"path": "pipeline/x", "type": "ModelOutputError"}}
    run = row(exit=1, transcript=failed, must_pass=True, scoring=True)
    run.update(model="instruct", template="own", run="standard", wall_s=3.0)
    run["proxy"].update(shapes={}, no_token_limit=0, finish={})
    run["problems"] = real_model_report.problems_of(run)
    table = real_model_report.markdown({"rows": [run]})
    (line,) = [ln for ln in table.splitlines() if "ASSERTION FAILED" in ln]
    assert line.startswith("- instruct/own/standard: ASSERTION FAILED: ") and "must exit 0" in line
    assert real_model_check.verdict(_context(), [], failed=True, interrupted=False) == 1
    assert "real-model-check: FAILED (see ASSERTION FAILED above)" in capsys.readouterr().out


@pytest.mark.parametrize(("cores", "load", "threads"), [(2, 0.2, 2), (2, 1.2, 1), (2, 9.0, 1)])
def test_threads_are_the_cores_the_load_leaves_free(
    monkeypatch: pytest.MonkeyPatch, cores: int, load: float, threads: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert real_model_io.free_threads() == threads


def test_the_runs_are_configured_as_the_page_says() -> None:
    """docs/real_model_check.md "Why the runs are set up as they are": logprobs judges with
    the three rubrics, six cards asked up to three times, no enclave in the standard run,
    and the token limits it names."""
    runs = {spec.name: spec for spec in real_model_check.RUNS}
    assert runs["standard"].overlay["prompt.refinement"] == "none"
    for name in ("scoring-3-judges", "llm-selector-2-rounds"):
        overlay = runs[name].overlay
        judges = overlay["prompt.scoring.judges"]
        assert [j["protocol"] for j in judges] == ["logprobs"] * 3
        assert [j["rubric"] for j in judges] == ["strict", "profile_fit", "novelty_heavy"]
        assert overlay["prompt.scoring.num_ideas"] == 6
        assert overlay["prompt.scoring.max_reasks"] == 2
    common = real_model_check.COMMON
    limits = {k.rsplit(".", 1)[1]: v for k, v in common.items() if ".max_output_tokens." in k}
    assert (limits["prose"], limits["card"]) == (300, 400)
    assert (limits["judge_base"], limits["judge_per_card"]) == (60, 40)


def test_runs_the_budget_left_out_are_skipped_not_failed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ctx = _context(skipped=["base/strict/standard seed 24"])
    assert real_model_check.verdict(ctx, [], failed=False, interrupted=False) == 0
    out = capsys.readouterr().out
    assert "SKIPPED (over the 600 s budget, not a code failure): 1 run(s): base/strict" in out
