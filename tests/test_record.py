"""The typed run record: one model for the transcript, the summary and the store.

* Every transcript this version writes (a successful, a failed, an interrupted and a scoring
  run) validates as a :class:`RunRecord` and re-serialises byte for byte.
* ``docs/transcript.schema.json`` is generated from the model and is current.
* Nothing is truncated: a 40-card ensemble records every judge's full order.
* Each fact is decided once: with scoring on and offline, the judge model in the run log, the
  transcript and the summary agree; the manifest names the offline image model; the byte
  count shown is the saved file's size.
* No hand-written answer schema and no ``type: ignore`` in the stages.
"""

from __future__ import annotations

import csv
import importlib
import json
import re
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from image_project.backends.base import TextRequest
from image_project.backends.factory import Backends, make_backends
from image_project.cli.command import main
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import RequestRejectedError
from image_project.record.events import ChatEvent, ImageEvent
from image_project.record.run import RunRecord
from image_project.record.schema import transcript_json_schema, transcript_json_schema_text
from image_project.record.scoring import ScoringRecord
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.testing import FakeImageBackend, FunctionTextBackend

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[1]
ENSEMBLE = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]",
)


def offline_cfg(tmp: Path, *extra: str) -> AppConfig:
    return load_config(
        root=REPO,
        env={},
        overrides=[
            "backend.provider=offline",
            f"image.generation_path={tmp / 'images'}",
            f"image.log_path={tmp / 'logs'}",
            f"prompt.generations_path={tmp / 'generations.csv'}",
            "prompt.random_seed=42",
            *extra,
        ],
    )


def transcript_file(tmp: Path) -> Path:
    (path,) = (tmp / "logs").glob("*_transcript.json")
    return path


def assert_round_trips(path: Path) -> RunRecord:
    """The file validates as a RunRecord and re-serialises to exactly the same bytes."""
    text = path.read_text(encoding="utf-8")
    record = RunRecord.model_validate_json(text)
    assert record.model_dump_json(indent=2) + "\n" == text
    again = RunRecord.model_validate_json(record.model_dump_json())
    assert again == record
    return record


# --------------------------------------------------------------------------- round trips


async def test_a_successful_run_round_trips(tmp_path: Path) -> None:
    cfg = offline_cfg(tmp_path)
    result = await run_generation(cfg, make_backends(cfg, {}))
    record = assert_round_trips(result.transcript_path)
    assert record.model_dump() == result.record.model_dump()  # (`order` is not serialised)
    assert record.succeeded and record.error is None and record.schema_version == 2
    kinds = [s.type for s in record.steps]
    assert kinds.count("image") == 1 and kinds[-2:] == ["image", "chat"]
    assert record.steps[-1].path == "title"


async def test_a_scoring_run_round_trips(tmp_path: Path) -> None:
    cfg = offline_cfg(tmp_path, *ENSEMBLE)
    result = await run_generation(cfg, make_backends(cfg, {}))
    record = assert_round_trips(result.transcript_path)
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord)
    assert [j.status for j in scoring.judges] == ["ok", "ok", "ok"]
    assert all(c.card is not None for c in scoring.candidates)
    assert scoring.selected_card is not None
    assert len(scoring.score_table) == 6 and scoring.selection is not None


async def test_a_failed_run_round_trips(tmp_path: Path) -> None:
    cfg = offline_cfg(tmp_path)
    backends = make_backends(cfg, {})
    failing = Backends(
        text=backends.text,
        image=FakeImageBackend(fail_with=RequestRejectedError("no such model", status=404)),
        provider="offline",
        description="offline text, failing image",
    )
    with pytest.raises(RunFailed) as caught:
        await run_generation(cfg, failing)
    record = assert_round_trips(transcript_file(tmp_path))
    assert record.model_dump() == caught.value.record.model_dump()
    assert record.error is not None
    assert (record.error.type, record.error.phase, record.error.status) == (
        "RequestRejectedError",
        "image",
        404,
    )
    assert record.final_image_prompt is not None
    # The image call was made, so it is recorded, with the error that failed it; the run's
    # error names it.
    assert record.error.path == "image" and record.error.step == "image"
    image = record.image_step
    assert image is not None and image.error is not None
    assert (image.error.type, image.error.status) == ("RequestRejectedError", 404)
    assert (image.received_bytes, image.format, image.model) == (None, None, "fake-image-model")
    assert record.usage.image_calls == 0


async def test_an_interrupted_run_round_trips(tmp_path: Path) -> None:
    cfg = offline_cfg(tmp_path, "prompt.scoring.enabled=true")
    offline = make_backends(cfg, {})
    in_flight = anyio.Event()

    async def stall_judges(request: TextRequest) -> str:
        if request.json_schema is not None and request.json_schema.name == "idea_scores":
            in_flight.set()
            await anyio.sleep_forever()
        reply = await offline.text.complete(request)
        return reply.text or ""

    backends = Backends(
        text=FunctionTextBackend(stall_judges, default_model="offline-text-1"),
        image=offline.image,
        provider="offline",
        description="offline, judges never answer",
    )
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await run_generation(cfg, backends)

        tg.start_soon(run)
        await in_flight.wait()
        tg.cancel_scope.cancel()
    record = assert_round_trips(transcript_file(tmp_path))
    assert record.error is not None and record.error.type == "interrupted"
    assert record.error.phase == "pipeline"
    assert record.error.cancelled_paths == ("pipeline/blackbox_scoring/judges/judge",)
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord) and scoring.selected_id is None
    assert all(c.card is not None for c in scoring.candidates)


def test_the_committed_transcript_schema_is_current() -> None:
    committed = (REPO / "docs" / "transcript.schema.json").read_text(encoding="utf-8")
    assert committed == transcript_json_schema_text(), (
        "docs/transcript.schema.json is stale: run `python -m image_project.record`"
    )
    schema = transcript_json_schema()
    assert schema["properties"]["schema_version"]["const"] == 2
    assert "order" not in json.dumps(schema["$defs"]["ChatEvent"]["properties"])


async def test_a_transcript_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    cfg = offline_cfg(tmp_path, "run.mode=prompt_only")
    result = await run_generation(cfg, make_backends(cfg, {}))
    data = json.loads(result.transcript_path.read_text(encoding="utf-8"))
    data["schema_version"] = 1
    with pytest.raises(ValidationError, match="schema_version") as caught:
        RunRecord.model_validate(data)
    assert caught.value.error_count() == 1  # one clear error, not dozens
    del data["schema_version"]
    with pytest.raises(ValueError, match=r"no schema_version \(version 1\)"):
        RunRecord.model_validate(data)
    data["schema_version"] = 2
    data["surprise"] = True
    with pytest.raises(ValueError, match="surprise"):
        RunRecord.model_validate(data)


# --------------------------------------------------------------------------- nothing truncated


async def test_forty_cards_record_every_judges_full_order(tmp_path: Path) -> None:
    cfg = offline_cfg(tmp_path, *ENSEMBLE, "prompt.scoring.num_ideas=40")
    result = await run_generation(cfg, make_backends(cfg, {}))
    record = assert_round_trips(result.transcript_path)
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord)
    assert len(scoring.candidates) == len(scoring.score_table) == 40
    ids = sorted(c.id for c in scoring.candidates)
    for judge in scoring.judges:
        assert len(judge.order) == 40 and sorted(judge.order) == ids
        step = next(s for s in record.steps if s.path == judge.path)
        assert isinstance(step, ChatEvent)
        assert step.meta["order"] == list(judge.order)  # the step's own copy, in full
        assert judge.scores is not None and len(judge.scores) == 40
    assert len({tuple(j.order) for j in scoring.judges}) == 3


# --------------------------------------------------------------------------- one place per fact


def test_offline_scoring_run_states_each_fact_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "--seed",
            "42",
            "--set",
            "prompt.scoring.enabled=true",
            "--set",
            "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]",
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
    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = RunRecord.model_validate_json(transcript_file(out).read_text(encoding="utf-8"))
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord)

    # The judge model: the record, every judge call, the run log and the summary agree.
    text_model = record.backend.text_model
    assert text_model == "offline-text-1"
    assert {j.model for j in scoring.judges} == {text_model}
    judge_calls = [s for s in record.chat_steps if "/judges/" in s.path]
    assert {s.params.model for s in judge_calls} == {text_model}
    log = (out / "logs" / f"{record.generation_id}.log").read_text(encoding="utf-8")
    logged = re.findall(r"\w+\(model=([^,]+), t=", log)
    assert logged == [text_model] * 3
    assert "gpt-6-luna" not in log  # the configured default text model
    panel = [line for line in captured.out.splitlines() if "  rubric " in line]
    assert len(panel) == 3 and all(line.endswith(f"  {text_model}") for line in panel)

    # The image model: the offline backend's own name everywhere.
    image = record.image_step
    assert isinstance(image, ImageEvent) and image.model == "offline-image-1"
    assert record.backend.image_model == "offline-image-1"
    with (out / "images" / "titles_manifest.csv").open(encoding="utf-8", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["model"] == "offline-image-1"
    assert "→ image (offline-image-1, 1536x1024)" in captured.err

    # The byte count shown is the size of the file on disk.
    assert record.image_path is not None
    saved = Path(record.image_path).stat().st_size
    assert record.image_bytes == saved
    assert f"{record.image_path} ({saved:,} bytes)" in captured.out
    assert f"✓ records: image #001, {saved:,} bytes" in captured.err
    shown = {int(n.replace(",", "")) for n in re.findall(r"([\d,]{5,}) bytes", captured.out)}
    assert shown == {saved}
    assert image.received_bytes != saved  # the PNG received is not what was saved


# --------------------------------------------------------------------------- code rules


def test_no_type_ignore_and_no_hand_written_answer_schema_in_the_stages() -> None:
    stages = sorted((REPO / "image_project" / "stages").rglob("*.py"))
    assert stages
    for path in stages:
        source = path.read_text(encoding="utf-8")
        assert "type: ignore" not in source, path
        # A hand-written schema would spell out JSON-schema keywords; answer schemas come
        # from models through image_project.engine.output.strict_json_schema.
        for keyword in ('"additionalProperties"', '"properties"', '"minItems"', "JsonSchema("):
            assert keyword not in source, f"{path}: {keyword}"


def test_the_schema_command_writes_the_schema_and_importing_it_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    module = importlib.reload(importlib.import_module("image_project.record.__main__"))
    assert list(tmp_path.iterdir()) == []  # importing (as the __all__ test does) writes nothing
    assert module.main([str(tmp_path / "schema.json")]) == 0
    assert (tmp_path / "schema.json").read_text(encoding="utf-8") == transcript_json_schema_text()
    assert "wrote" in capsys.readouterr().out
