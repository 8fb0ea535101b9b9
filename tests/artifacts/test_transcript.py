"""The transcript file: a RunRecord's JSON, written atomically and read back into the model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from image_project.artifacts.transcript import read_transcript, transcript_path, write_transcript
from image_project.backends.base import Usage
from image_project.record.events import (
    ActionEvent,
    ChatEvent,
    ChatParams,
    ImageEvent,
    Reask,
    StepError,
)
from image_project.record.run import BackendInfo, RunError, RunRecord, RunUsage, Timing, TitleRecord
from image_project.record.scoring import (
    CandidateRecord,
    CardOptions,
    IdeaCard,
    JudgeResult,
    Motif,
    NoveltyRecord,
    ScoreRow,
    ScoringRecord,
    SelectionDetail,
)

CREATED = "2024-05-01T12:00:00+00:00"


def chat(name: str, response: str | None, **fields: object) -> ChatEvent:
    return ChatEvent.model_validate(
        {
            "name": name,
            "path": f"pipeline/{name}",
            "prompt": f"prompt of {name}",
            "response": response,
            "params": ChatParams(temperature=0.8, model="offline-text-1", seed=11),
            "context_messages": 2,
            "created_at": CREATED,
            "latency_ms": 12.5,
            "usage": Usage(10, 5, 15),
            "attempts": 1,
            "answers": 1,
            **fields,
        }
    )


def record(**fields: object) -> RunRecord:
    """A small successful run: a chat step, an action, the image, a title."""
    base: dict[str, object] = {
        "schema_version": 2,
        "generation_id": "20240501_abc",
        "seed": 42,
        "created_at": CREATED,
        "run_mode": "full",
        "backend": BackendInfo(
            provider="offline",
            description="Using the built-in OFFLINE backend",
            text_model="offline-text-1",
            image_model="offline-image-1",
            execution_mode="concurrent",
        ),
        "selected_concepts": ("Baroque", "Café — 東京"),
        "steps": (
            chat("draft", "Café — 東京 at dusk"),
            ActionEvent(
                name="pick",
                path="pipeline/pick",
                created_at=CREATED,
                latency_ms=0.1,
                result={"chosen": ["a", 1, None, 2.5], "deep": {"x": [[{"y": True}]]}},
            ),
            ImageEvent(
                prompt="a harbour",
                model="offline-image-1",
                size="1536x1024",
                quality="high",
                seed=42,
                created_at=CREATED,
                latency_ms=40.0,
                attempts=1,
                received_bytes=1234,
                format="png",
                metadata={"palette": ["teal"], "layout": "horizon"},
            ),
        ),
        "final_image_prompt": "a harbour",
        "image_path": "/tmp/out/20240501_abc.jpg",
        "image_bytes": 999,
        "title_generation": TitleRecord(
            title="Harbour Reverie",
            title_source="llm",
            title_raw="Harbour Reverie",
            attempts=1,
            seq=7,
            caption="#007 - Harbour Reverie",
        ),
        "usage": RunUsage(prompt_tokens=10, completion_tokens=5, total_tokens=15, model_calls=1),
        "timing": Timing(wall_s=1.5, phases_s={"prompt": 1.0, "image": 0.5}),
    }
    base.update(fields)
    return RunRecord.model_validate(base)


def scoring() -> ScoringRecord:
    card = IdeaCard(
        hook="A teal harbour",
        narrative="Gulls over domes at dusk.",
        options=CardOptions(
            composition=["horizon", "diagonal"],
            palette=["teal", "gold"],
            medium=["oil"],
            mood=["calm"],
        ),
        avoid=[],
    )
    return ScoringRecord(
        config_snapshot={"num_ideas": 2, "judges": [{"id": "judge"}]},
        candidates=(
            CandidateRecord(id="A", seed=1, direction="quiet", card=card),
            CandidateRecord(id="B", seed=2, direction="bold"),
        ),
        judges=(
            JudgeResult(
                id="judge",
                model="offline-text-1",
                temperature=0.0,
                status="ok",
                attempts=1,
                order=("B", "A"),
                path="blackbox_scoring/judges/judge",
                scores={"B": 40, "A": 80},
            ),
        ),
        score_table=(
            ScoreRow(
                id="A",
                judge_scores={"judge": 80},
                median=80,
                aggregate=80,
                spread=0,
                n_ok=1,
                effective_score=80.0,
            ),
        ),
        selected_id="A",
        selected_score=80,
        exploration_rate=0.15,
        exploration_roll=0.5,
        selection_mode="exploit",
        selection=SelectionDetail(ranking=("A", "B"), explore_pool=(), explore_roll=None),
        novelty=NoveltyRecord(
            enabled=True,
            used=True,
            window=25,
            rows=3,
            motifs=(Motif(word="harbour", prompts=2, share=0.67),),
        ),
    )


def test_transcript_keeps_non_ascii_indent_and_trailing_newline(tmp_path: Path) -> None:
    path = transcript_path(tmp_path / "logs", "20240501_abc")
    assert path == tmp_path / "logs" / "20240501_abc_transcript.json"
    assert write_transcript(path, record()) == path
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    assert "Café — 東京" in text  # written as UTF-8, not \u escapes
    assert "\\u" not in text
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert '\n  "generation_id": ' in text
    assert json.loads(text)["selected_concepts"] == ["Baroque", "Café — 東京"]
    assert json.loads(text)["schema_version"] == 2
    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"blackbox_scoring": scoring()},
        {
            "steps": (
                chat(
                    "judge",
                    None,
                    reasks=(Reask.of("nope", "expected a JSON object"),),
                    error=StepError(type="RefusalError", message="declined", reason="refused"),
                    meta={"role": "judge", "order": ["B", "A"]},
                ),
            ),
            "image_path": None,
            "image_bytes": None,
            "title_generation": None,
            "error": RunError(
                type="ServerError",
                message="boom",
                phase="prompt",
                step="draft",
                path="pipeline/draft",
                cancelled_paths=("pipeline/other",),
                status=503,
                attempts=4,
            ),
        },
    ],
    ids=["success", "scoring", "failed"],
)
def test_round_trip_gives_an_equal_record(tmp_path: Path, extra: dict[str, object]) -> None:
    original = record(**extra)
    path = write_transcript(tmp_path / "t.json", original)
    loaded = read_transcript(path)
    assert loaded == original
    assert loaded.succeeded is (original.error is None)
    # Every step comes back as its own type (the union is discriminated by "type").
    assert [type(s) for s in loaded.steps] == [type(s) for s in original.steps]


def test_rewriting_replaces_the_file_atomically(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "t.json"
    write_transcript(path, record(final_image_prompt="first " * 500))
    first_inode = os.stat(path).st_ino
    write_transcript(path, record(final_image_prompt="second"))
    # A new file renamed over the old one (never the old file truncated and rewritten), the
    # whole new content and nothing of the old, and no temporary file left beside it.
    assert os.stat(path).st_ino != first_inode
    assert read_transcript(path).final_image_prompt == "second"
    assert "first" not in path.read_text(encoding="utf-8")
    assert [p.name for p in path.parent.iterdir()] == ["t.json"]


def test_a_lone_surrogate_still_writes_a_readable_transcript(tmp_path: Path) -> None:
    # A model answer can hold a lone surrogate that UTF-8 cannot encode; the transcript of
    # that run must still be written (with a replacement character) and stay readable.
    bad = record(steps=(chat("draft", "before \ud800 after"),))
    path = write_transcript(tmp_path / "t.json", bad)
    raw = path.read_bytes()
    raw.decode("utf-8")  # strict UTF-8
    assert raw.endswith(b"}\n")
    loaded = read_transcript(path)
    response = loaded.chat_steps[0].response
    assert response is not None
    assert "\ud800" not in response
    assert response.startswith("before ") and response.endswith(" after")
    assert len(response) == len("before \ud800 after")
    # Everything else is unchanged, other non-ASCII text included.
    assert loaded.selected_concepts == ("Baroque", "Café — 東京")
    assert loaded.model_dump(exclude={"steps"}) == bad.model_dump(exclude={"steps"})


def test_a_file_that_is_not_a_transcript_of_this_version_fails_loudly(tmp_path: Path) -> None:
    path = write_transcript(tmp_path / "t.json", record())
    data = json.loads(path.read_text(encoding="utf-8"))
    for change in ({"schema_version": 1}, {"unknown_key": 1}):
        path.write_text(json.dumps({**data, **change}), encoding="utf-8")
        with pytest.raises(ValidationError):
            read_transcript(path)


@pytest.mark.parametrize("bad", ["", "  ", "a/b", "a\\b", "..", ".", "a\0b"])
def test_transcript_path_rejects_ids_that_are_not_file_names(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError):
        transcript_path(tmp_path, bad)
