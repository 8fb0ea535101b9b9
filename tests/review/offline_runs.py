"""Real offline runs for the review tests: the offline pipeline, scoring on with a 3-judge
ensemble, plus a run without scoring (with a 4K image) and a run that fails at the image
call; (:func:`make_round_runs`) a multi-round run with the LLM selector (its second
round's proposal invalid, so the code choice replaces it), a multi-round run interrupted while
its second round is judged, a scoring run that fails before scoring starts and a prompt-only
run; and (:func:`make_protocol_run`) a run whose judges use every judging protocol, with
context injectors and novelty on (with ``reask=True``, the ``reasoned`` judge's first answer
is prose, rejected and re-asked)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import anyio
import pytest

from image_project.backends.base import TextReply, TextRequest
from image_project.backends.factory import Backends, make_backends
from image_project.backends.offline.text import OfflineTextBackend
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import RequestRejectedError, ServerError
from image_project.record.run import RunRecord
from image_project.review.source import records_from_transcripts
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.testing import FakeImageBackend, FunctionTextBackend

__all__ = [
    "ENSEMBLE",
    "EVOLUTION",
    "PROTOCOLS_AND_CONTEXT",
    "UPSCALE",
    "make_offline_runs",
    "make_protocol_run",
    "make_round_runs",
    "offline_cfg",
]

REPO = Path(__file__).resolve().parents[2]
ENSEMBLE = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]",
)
EVOLUTION = (
    *ENSEMBLE,
    "prompt.scoring.evolution.enabled=true",
    "prompt.scoring.evolution.generations=2",
    "prompt.scoring.evolution.selector=llm",
)
PROTOCOLS_AND_CONTEXT = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.judges=[{id: why, protocol: reasoned, rubric: strict},"
    " {id: duel, protocol: pairwise, rubric: {text: 'Score by the harbour light.'}},"
    " {id: probs, protocol: logprobs, profile: hints}, {id: each, protocol: pointwise}]",
    "prompt.scoring.novelty.enabled=true",
    "context.enabled=true",
    "context.date=2026-12-20",
)
UPSCALE = (
    "upscale.enabled=true",
    "upscale.allow_fallback_resize=true",
    "upscale.target_long_edge_px=2048",
)


def offline_cfg(out: Path, seed: int, *extra: str) -> AppConfig:
    return load_config(
        root=REPO,
        env={},
        overrides=[
            "backend.provider=offline",
            f"image.generation_path={out / 'images'}",
            f"image.log_path={out / 'logs'}",
            f"prompt.generations_path={out / 'generations.csv'}",
            f"prompt.random_seed={seed}",
            *extra,
        ],
    )


async def _runs(out: Path) -> None:
    for seed in (11, 12):
        cfg = offline_cfg(out, seed, *ENSEMBLE)
        await run_generation(cfg, make_backends(cfg, {}))
    # The plain run makes a 4K image too (a smaller one: the test is about the site).
    plain = offline_cfg(out, 13, *UPSCALE)
    await run_generation(plain, make_backends(plain, {}))
    cfg = offline_cfg(out, 14, *ENSEMBLE)
    failing = Backends(
        text=make_backends(cfg, {}).text,
        image=FakeImageBackend(fail_with=RequestRejectedError("no such model", status=404)),
        provider="offline",
        description="offline text, failing image",
    )
    with pytest.raises(RunFailed):
        await run_generation(cfg, failing)


def make_offline_runs(out: Path) -> list[RunRecord]:
    """Four runs into ``out`` (two scoring, one plain with a 4K image, one failed), newest
    first."""
    anyio.run(_runs, out)
    records = records_from_transcripts(sorted((out / "logs").glob("*_transcript.json")))
    assert len(records) == 4
    return records


def _role(request: TextRequest) -> str:
    return request.json_schema.name if request.json_schema is not None else "text"


def _selector_fails_after_round_0() -> FunctionTextBackend:
    """The offline answers, except that every survivor selection after the first (round 1's
    answer and its re-ask) names one card three times: round 1 falls back to the code."""
    offline = OfflineTextBackend()
    calls = 0

    async def answer(request: TextRequest) -> TextReply:
        nonlocal calls
        if _role(request) == "survivor_selection":
            calls += 1
            if calls > 1:
                reply = await offline.complete(request)
                data = json.loads(reply.text or "{}")
                first = data["selections"][0]
                data["selections"] = [first] * len(data["selections"])
                return dataclasses.replace(reply, text=json.dumps(data))
        return await offline.complete(request)

    return FunctionTextBackend(answer)


def _judges_hang_in_round_1(arrived: anyio.Event) -> FunctionTextBackend:
    """The offline answers, except that judge calls after round 0's three never return
    (until cancelled); ``arrived`` is set when the first of them is in flight."""
    offline = OfflineTextBackend()
    judged = 0

    async def answer(request: TextRequest) -> TextReply:
        nonlocal judged
        if _role(request) == "idea_scores":
            judged += 1
            if judged > 3:
                arrived.set()
                await anyio.sleep_forever()
        return await offline.complete(request)

    return FunctionTextBackend(answer)


def _fails_at_once() -> FunctionTextBackend:
    async def answer(request: TextRequest) -> TextReply:
        raise ServerError("upstream overloaded", status=503)

    return FunctionTextBackend(answer)


def _with_text(cfg: AppConfig, text: FunctionTextBackend) -> Backends:
    return Backends(
        text=text,
        image=make_backends(cfg, {}).image,
        provider="offline",
        description="offline, scripted text",
    )


async def _round_runs(out: Path) -> None:
    cfg = offline_cfg(out, 21, *EVOLUTION)
    await run_generation(cfg, _with_text(cfg, _selector_fails_after_round_0()))
    cfg = offline_cfg(out, 22, *EVOLUTION)
    arrived = anyio.Event()
    with pytest.raises(anyio.get_cancelled_exc_class()):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_generation, cfg, _with_text(cfg, _judges_hang_in_round_1(arrived)))
            await arrived.wait()
            raise anyio.get_cancelled_exc_class()()
    cfg = offline_cfg(out, 23, *ENSEMBLE)
    with pytest.raises(RunFailed):
        await run_generation(cfg, _with_text(cfg, _fails_at_once()))
    cfg = offline_cfg(out, 24, "run.mode=prompt_only")
    await run_generation(cfg, make_backends(cfg, {}))


def make_round_runs(out: Path) -> dict[str, RunRecord]:
    """Four runs into ``out``, by name: ``rounds`` (three rounds, LLM selector, round 1 fell
    back to the code choice), ``interrupted`` (cancelled while round 1 was judged),
    ``failed_early`` (scoring on, the first model call failed) and ``prompt_only``."""
    anyio.run(_round_runs, out)
    records = records_from_transcripts(sorted((out / "logs").glob("*_transcript.json")))
    by_seed = {r.seed: r for r in records}
    assert sorted(by_seed) == [21, 22, 23, 24], sorted(by_seed)
    return {
        "rounds": by_seed[21],
        "interrupted": by_seed[22],
        "failed_early": by_seed[23],
        "prompt_only": by_seed[24],
    }


def _reasoned_judge_answers_prose_once() -> FunctionTextBackend:
    """The offline answers, except the ``reasoned`` judge's first (its scores' schema asks
    for rationales): a sentence of prose, which its re-ask rejects."""
    offline = OfflineTextBackend()
    prose = True

    async def answer(request: TextRequest) -> TextReply:
        nonlocal prose
        schema = request.json_schema
        reasoned = schema is not None and "rationale" in str(schema.schema)
        reply = await offline.complete(request)
        if reasoned and prose:
            prose = False
            return dataclasses.replace(reply, text="Card A is the best of them, I would say.")
        return reply

    return FunctionTextBackend(answer)


async def _protocol_run(out: Path, reask: bool) -> None:
    cfg = offline_cfg(out, 31, *PROTOCOLS_AND_CONTEXT)
    if reask:
        await run_generation(cfg, _with_text(cfg, _reasoned_judge_answers_prose_once()))
    else:
        await run_generation(cfg, make_backends(cfg, {}))


def make_protocol_run(out: Path, *, reask: bool = False) -> RunRecord:
    """One run into ``out`` whose four judges use the ``reasoned``, ``pairwise``,
    ``logprobs`` and ``pointwise`` protocols, with context injectors and novelty on;
    ``reask``: the ``reasoned`` judge's first answer is prose (rejected, re-asked)."""
    anyio.run(_protocol_run, out, reask)
    (record,) = records_from_transcripts(sorted((out / "logs").glob("*_transcript.json")))
    return record
