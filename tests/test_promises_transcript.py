"""docs/transcript.md against the record models:

* every JSON excerpt is an object the models read, with exactly the keys the writer writes
  (the page says every key of a kind is always written: a key the excerpt lacks, or has
  extra, is a page out of date) — only the keys and rows the page says it left out differ;
* every field table names the fields of its model (no field unexplained, none made up);
* the keys written only when they apply are the ones the page says so of;
* the failed run the page shows is what its command makes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from image_project.cli.command import main
from image_project.record.context import ContextRecord
from image_project.record.events import ActionEvent, ChatEvent, ChatParams, ImageEvent, Reask
from image_project.record.run import RunError, RunRecord, Timing
from image_project.record.scoring import JudgeResult, RoundRecord, ScoringRecord
from image_project.record.upscale import UpscaleRecord

REPO = Path(__file__).resolve().parents[1]
PAGE = (REPO / "docs" / "transcript.md").read_text(encoding="utf-8")

LEFT_OUT = {"steps", "blackbox_scoring", "context"}
"""The top-level excerpt is "the transcript without steps, blackbox_scoring and context"."""


def excerpts() -> list[dict[str, Any]]:
    """Every ```json block of the page, a fragment (``"error": {...}``) made an object."""
    found = []
    for block in re.findall(r"```json\n(.*?)```", PAGE, re.DOTALL):
        text = block.strip()
        found.append(json.loads(text if text.startswith("{") else "{" + text + "}"))
    return found


def model_of(excerpt: dict[str, Any]) -> list[tuple[type[BaseModel], dict[str, Any]]]:
    """The models the excerpt's objects are, each with its object."""
    kinds: dict[str, type[BaseModel]] = {
        "chat": ChatEvent,
        "image": ImageEvent,
        "action": ActionEvent,
    }
    if "schema_version" in excerpt:
        return [(RunRecord, excerpt)]
    if excerpt.get("type") in kinds:
        return [(kinds[excerpt["type"]], excerpt)]
    if "scores" in excerpt and "status" in excerpt:
        return [(JudgeResult, excerpt)]
    if "date_used" in excerpt:
        return [(ContextRecord, excerpt)]
    fragments: dict[str, type[BaseModel]] = {
        "error": RunError,
        "upscale": UpscaleRecord,
        "timing": Timing,
    }
    return [(fragments[key], value) for key, value in excerpt.items() if key in fragments]


def key_differences(shown: Any, written: Any, where: str = "") -> list[str]:
    """Where ``shown`` (an excerpt) and ``written`` (what the writer makes of it) differ in
    their keys; lists are compared item by item as far as the shorter goes (excerpts trim
    rows)."""
    if isinstance(shown, dict) and isinstance(written, dict):
        found = [f"{where}.{k}: not in the excerpt" for k in written.keys() - shown.keys()]
        found += [f"{where}.{k}: not written" for k in shown.keys() - written.keys()]
        for key in shown.keys() & written.keys():
            found += key_differences(shown[key], written[key], f"{where}.{key}")
        return found
    if isinstance(shown, list) and isinstance(written, list):
        return [
            d
            for i, (a, b) in enumerate(zip(shown, written, strict=False))
            for d in key_differences(a, b, f"{where}[{i}]")
        ]
    return []


CASES = [
    pytest.param(model, value, id=f"{i}-{model.__name__}")
    for i, excerpt in enumerate(excerpts())
    for model, value in model_of(excerpt)
]


def test_every_excerpt_is_matched_to_a_model() -> None:
    """Control: every excerpt is read (the judge's one-line ``meta`` is not an object of
    its own, and the 4K block holds two: ``upscale`` and ``timing``)."""
    assert len(CASES) == len(excerpts())
    assert {c.values[0] for c in CASES} >= {RunRecord, ChatEvent, ImageEvent, RunError}


@pytest.mark.parametrize(("model", "shown"), CASES)
def test_every_excerpt_has_exactly_the_keys_the_writer_writes(
    model: type[BaseModel], shown: dict[str, Any]
) -> None:
    written = model.model_validate(shown).model_dump(mode="json")
    if model is RunRecord:
        written = {k: v for k, v in written.items() if k not in LEFT_OUT}
    assert key_differences(shown, written) == []


def table_names(first: str) -> list[str]:
    """The backticked names in the first column of the table whose first row names
    ``first``."""
    for table in re.findall(r"(?:^\|.*\n)+", PAGE, re.MULTILINE):
        rows = table.splitlines()[2:]
        cells = [row.split("|")[1].strip() for row in rows]
        # A row such as "holiday `metadata`" explains a part of a field above it.
        names = [n for c in cells if c.startswith("`") for n in re.findall(r"`([\w\[\].]+)`", c)]
        if names and names[0] == first:
            return names
    raise AssertionError(f"no table starting with {first!r}")


@pytest.mark.parametrize(
    ("first", "model", "said_elsewhere"),
    [
        ("schema_version", RunRecord, set()),
        ("name", ChatEvent, {"type"}),  # "Each step has a type"
        ("prompt", ImageEvent, {"type", "name", "path"}),  # as for every step
        ("config_snapshot", ScoringRecord, {"enabled", "normalise"}),  # the page's prose
        ("index", RoundRecord, set()),
        ("date_used", ContextRecord, {"enabled"}),
        ("type", RunError, set()),
        ("path", UpscaleRecord, set()),
    ],
)
def test_every_field_table_names_the_fields_of_its_model(
    first: str, model: type[BaseModel], said_elsewhere: set[str]
) -> None:
    names = {n.removesuffix("[]") for n in table_names(first)}
    fields = {f for f, info in model.model_fields.items() if not info.exclude}
    assert names - fields == set(), "named, but not a field"
    assert fields - names - said_elsewhere == set(), "a field the table leaves out"


def test_the_keys_written_only_when_they_apply_are_the_ones_the_page_says() -> None:
    conditional = {
        f"{model.__name__}.{name}"
        for model in (RunRecord, ChatEvent, ChatParams, Reask, ImageEvent, ActionEvent, RunError)
        for name, info in model.model_fields.items()
        if info.exclude_if is not None
    }
    assert conditional == {
        "ChatParams.backend",  # "`backend` only when the call went to another backend"
        "ChatParams.top_logprobs",  # "`top_logprobs` only when the step asked"
        "ChatEvent.response_chars",  # "only on a step that failed"
        "ChatEvent.response_sha256",
        "ChatEvent.logprobs",  # "only on a step that asked for them and got them"
        "Reask.seed",  # "a re-ask sent with its own sampling ... has seed and temperature"
        "Reask.temperature",
    }
    for said in (
        "`backend` only when",
        "`top_logprobs` only when",
        "| `response_chars`, `response_sha256` | only on a step that failed",
        "| `logprobs` | only on a step that asked for them",
        "has `seed` and `temperature` in\nits `reasks[]` entry",
    ):
        assert said in PAGE, said


def test_the_pages_unreachable_server_run_fails_at_its_first_call_as_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    (command,) = re.findall(r"A run against a server that is not there \(`(.*?)`", PAGE, re.S)
    sets = re.findall(r"--set (\S+)", command)
    assert any(s.startswith("backend.base_url=http://127.0.0.1:9/") for s in sets)
    out = tmp_path / "out"
    outputs = [f"image.log_path={out}", f"image.generation_path={out}"]
    outputs.append(f"prompt.generations_path={out / 'g.csv'}")
    argv = ["--seed", "42", *(a for s in (*sets, *outputs) for a in ("--set", s))]
    assert main(argv, env={}, root=REPO) == 1, capsys.readouterr().err
    (transcript,) = out.glob("*_transcript.json")
    record = json.loads(transcript.read_text(encoding="utf-8"))
    assert record["steps"] == []
    (shown,) = [e["error"] for e in excerpts() if (e.get("error") or {}).get("attempts") == 2]
    assert record["error"] == shown


@pytest.mark.anyio
async def test_transcripts_written_before_the_keys_added_within_version_2_still_read(
    tmp_path: Path,
) -> None:
    """ "Added within version 2": a transcript without the judge panel's keys, the 4K
    image's, the context's, the rounds' and the image step's ``error`` reads, each taking
    the default the page gives."""
    from image_project.backends.factory import make_backends
    from image_project.config.loading import load_config
    from image_project.run.driver import run_generation

    cfg = load_config(
        root=REPO,
        env={},
        overrides=[
            "backend.provider=offline",
            f"image.generation_path={tmp_path}",
            f"image.log_path={tmp_path}",
            f"prompt.generations_path={tmp_path / 'g.csv'}",
            "prompt.random_seed=42",
            "prompt.scoring.enabled=true",
            "prompt.scoring.normalise=none",
            "prompt.scoring.judges=[{id: a}, {id: b}]",
        ],
    )
    result = await run_generation(cfg, make_backends(cfg, {}))
    data = json.loads(result.transcript_path.read_text(encoding="utf-8"))
    scoring = data["blackbox_scoring"]
    assert "evolution" not in scoring and "evolution" not in scoring["config_snapshot"]
    assert "normalise" not in scoring
    del data["upscale"], data["context"], scoring["aggregation"]
    for row in scoring["score_table"]:
        del row["aggregate"]
    for judge in scoring["judges"]:
        del judge["rubric"], judge["profile"], judge["weight"]
    (image,) = [s for s in data["steps"] if s["type"] == "image"]
    del image["error"]

    old = RunRecord.model_validate(data)
    assert old.upscale is None and old.context.enabled is False
    assert isinstance(old.blackbox_scoring, ScoringRecord)
    assert old.blackbox_scoring.evolution is None  # a one-round run
    assert old.blackbox_scoring.aggregation == "median"
    assert [r.aggregate for r in old.blackbox_scoring.score_table] == [
        r.median for r in old.blackbox_scoring.score_table
    ]
    assert {(j.rubric, j.profile, j.weight) for j in old.blackbox_scoring.judges} == {
        ("default", "raw", 1.0)
    }
    assert old.image_step is not None and old.image_step.error is None


def test_the_pages_gates_are_the_codes() -> None:
    from image_project.record.gates import GATES

    text = PAGE[PAGE.index("validated but say nothing:") : PAGE.index("(`GATES`")]
    assert re.findall(r"`(\w+)`", text) == list(GATES)
