"""The built-in offline backend: deterministic, schema-valid, readable, and a real picture."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import io
import json
import math
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from PIL import Image, ImageDraw, ImageStat
from pydantic import BaseModel, ConfigDict, Field

from image_project.artifacts.image import caption_layout
from image_project.backends.base import (
    STRICT_KEYWORDS,
    ImageBackend,
    ImageRequest,
    JsonSchema,
    Message,
    TextBackend,
    TextReply,
    TextRequest,
)
from image_project.backends.factory import Backends
from image_project.backends.jsonschema_instance import (
    SUPPORTED_KEYWORDS,
    UnsupportedSchemaError,
    check_schema,
    generate_instance,
)
from image_project.backends.offline import drawing as offline_drawing
from image_project.backends.offline.image import OfflineImageBackend
from image_project.backends.offline.seed import _derive_seed
from image_project.backends.offline.text import OfflineTextBackend
from image_project.backends.offline.vocabulary import LAYOUTS
from image_project.backends.offline.words import _last_user_text, _salient_units
from image_project.config.loading import load_config
from image_project.config.models import ProfileView, RubricSpec
from image_project.engine.context import Context
from image_project.engine.output import JsonOutput, strict_json_schema
from image_project.engine.runner import ChatRunner
from image_project.errors import RequestRejectedError
from image_project.record.scoring import IdeaCard
from image_project.run.driver import run_generation
from image_project.stages.scoring.cards import CARD_OUTPUT
from image_project.stages.scoring.hints import ProfileHints, hints_output
from image_project.stages.scoring.judges import judge_output, reasoned_output
from image_project.stages.scoring.novelty import NoveltyState, recent_motifs
from image_project.stages.scoring.prompts import judge_prompt
from image_project.stages.scoring.rubrics import judge_system_prompt
from image_project.stages.standard import (
    Brief,
    concept_rewrite_output,
    dislike_rewrite_step,
)

pytestmark = pytest.mark.anyio

USER = (
    "Concepts: Baroque, Bird's-Eye View, Complementary colours. Write one idea card about "
    "a teal harbour at dusk with gulls circling over lantern-lit domes."
)
MESSAGES = (Message("system", "You are a careful art director."), Message("user", USER))


# --------------------------------------------------------------------------- answer schemas
# Every schema below is generated from a pydantic answer model by strict_json_schema, the
# only way the package builds an answer schema. Two small models cover every strict keyword;
# the rest are the package's real answer models.


class Swatch(BaseModel):
    model_config = ConfigDict(title="swatch")

    warmth: Literal["warm", "cool", "neutral"]
    strength: float = Field(ge=0.0, le=1.0)
    layers: int = Field(ge=1, le=3)


class Sketch(BaseModel):
    model_config = ConfigDict(title="sketch")

    title: str
    description: str
    offset: int = Field(ge=-3, le=3)
    score: int = Field(ge=0, le=100)
    count: int
    framed: bool
    tilt: float
    main: Swatch
    swatches: list[Swatch] = Field(min_length=1)
    tags: list[str] = Field(min_length=2, max_length=5)
    notes: list[str]


JUDGE_IDS = ["A", "B", "C", "D", "E", "F"]
JUDGE_ORDER = ["D", "A", "F", "C", "E", "B"]  # a judge sees the cards shuffled
JudgeModel = judge_output(JUDGE_IDS).model
RewriteModel = concept_rewrite_output(3).model

MODELS: dict[str, type[BaseModel]] = {
    "sketch": Sketch,
    "idea_card": IdeaCard,
    "profile_hints": ProfileHints,
    "judge": JudgeModel,
    "concept_rewrite": RewriteModel,
}


def schema_of(model: type[BaseModel]) -> JsonSchema:
    return strict_json_schema(model)


IDEA_CARD = schema_of(IdeaCard)
JUDGE = schema_of(JudgeModel)
HINTS = schema_of(ProfileHints)
REWRITE = schema_of(RewriteModel)


def keywords(node: Any) -> Iterator[str]:
    """Every keyword used anywhere in a schema."""
    if isinstance(node, Mapping):
        yield from node
        for name, sub in node.items():
            if name == "properties":
                for prop in sub.values():
                    yield from keywords(prop)
            elif name == "items":
                yield from keywords(sub)


def _validate(value: Any, schema: Mapping[str, Any], where: str = "$") -> None:
    """A small validator for the strict subset (jsonschema may be absent)."""
    assert set(schema) <= STRICT_KEYWORDS, f"{where}: {sorted(set(schema) - STRICT_KEYWORDS)}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in enum"
    checks: dict[str, Callable[[Any], bool]] = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }
    assert checks[schema["type"]](value), f"{where}: {value!r} is not {schema['type']}"
    if isinstance(value, dict):
        props = schema.get("properties", {})
        assert set(schema.get("required", [])) <= value.keys(), f"{where}: missing keys"
        assert schema.get("additionalProperties") is False, f"{where}: not a strict object"
        assert value.keys() <= props.keys(), f"{where}: extra keys"
        for key, sub in value.items():
            _validate(sub, props[key], f"{where}.{key}")
    if isinstance(value, list):
        assert len(value) >= schema.get("minItems", 0), f"{where}: too few items"
        assert len(value) <= schema.get("maxItems", math.inf), f"{where}: too many items"
        for i, item in enumerate(value):
            _validate(item, schema["items"], f"{where}[{i}]")
    if isinstance(value, int | float) and not isinstance(value, bool):
        assert value >= schema.get("minimum", -math.inf), where
        assert value <= schema.get("maximum", math.inf), where


def assert_valid(value: Any, schema: Mapping[str, Any]) -> None:
    _validate(value, schema)
    if importlib.util.find_spec("jsonschema") is not None:  # a second opinion when installed
        importlib.import_module("jsonschema").validate(value, schema)


def text_request(
    messages: tuple[Message, ...] = MESSAGES,
    *,
    seed: int | None = 7,
    temperature: float = 0.9,
    schema: JsonSchema | None = None,
    max_output_tokens: int | None = None,
) -> TextRequest:
    return TextRequest(
        messages=messages,
        temperature=temperature,
        seed=seed,
        json_schema=schema,
        max_output_tokens=max_output_tokens,
    )


def user(text: str) -> tuple[Message, ...]:
    return (Message("user", text),)


async def complete(request: TextRequest) -> str:
    reply = await OfflineTextBackend().complete(request)
    assert reply.text is not None
    return reply.text


# --------------------------------------------------------------------------- protocol, reply


def test_backends_implement_the_protocols() -> None:
    text, image = OfflineTextBackend(), OfflineImageBackend()
    assert isinstance(text, TextBackend)
    assert isinstance(image, ImageBackend)
    assert (text.label, text.default_model) == ("offline", "offline-text-1")
    assert (image.label, image.default_model) == ("offline", "offline-image-1")


async def test_reply_reports_offline_metadata_and_usage() -> None:
    reply = await OfflineTextBackend().complete(text_request())
    assert isinstance(reply, TextReply)
    assert reply.model == "offline-text-1"
    assert (reply.finish_reason, reply.system_fingerprint, reply.attempts) == (
        "stop",
        "offline",
        1,
    )
    assert reply.refusal is None
    assert reply.usage is not None
    assert reply.usage.prompt_tokens > len(USER.split())
    assert reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens

    named = await OfflineTextBackend().complete(
        TextRequest(messages=MESSAGES, temperature=0.0, model="custom")
    )
    assert named.model == "custom"


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("schema", [None, IDEA_CARD], ids=["prose", "schema"])
async def test_same_request_gives_the_same_reply(schema: JsonSchema | None) -> None:
    first = await complete(text_request(schema=schema))
    again = await OfflineTextBackend().complete(text_request(schema=schema))
    assert again.text == first


@pytest.mark.parametrize("schema", [None, IDEA_CARD, JUDGE], ids=["prose", "card", "judge"])
async def test_different_seeds_give_different_replies(schema: JsonSchema | None) -> None:
    replies = {await complete(text_request(seed=seed, schema=schema)) for seed in range(5)}
    assert len(replies) == 5


async def test_temperature_is_part_of_the_request() -> None:
    replies = {await complete(text_request(temperature=t)) for t in (0.0, 0.5, 1.0)}
    assert len(replies) == 3


async def test_concurrent_calls_match_sequential_calls() -> None:
    backend = OfflineTextBackend()
    requests = [
        text_request(seed=seed, schema=IDEA_CARD if seed % 2 else None) for seed in range(12)
    ]
    sequential = [(await backend.complete(r)).text for r in requests]
    concurrent: list[str | None] = [None] * len(requests)

    async def run(i: int) -> None:
        concurrent[i] = (await backend.complete(requests[i])).text

    async with anyio.create_task_group() as tg:
        for i in range(len(requests)):
            tg.start_soon(run, i)
    assert concurrent == sequential


def test_generation_does_not_touch_the_global_random() -> None:
    # This test watches the global generator that TID251 bans elsewhere: any draw from it
    # changes its state. Reading the state (not seeding) leaves it as other tests found it.
    before = random.getstate()  # noqa: TID251
    generate_instance(IDEA_CARD.schema, random.Random(1), ["teal harbour"])
    generate_instance(schema_of(Sketch).schema, random.Random(1), ["teal harbour"])
    assert random.getstate() == before  # noqa: TID251


# --------------------------------------------------------------------------- structured output


def test_supported_keywords_are_the_strict_keywords_and_the_grammar_lengths() -> None:
    """The grammar dialect's lengths are answered (tests/backends/test_wire.py); its
    ``pattern`` is not (a generated phrase cannot be made to match one)."""
    assert STRICT_KEYWORDS | {"minLength", "maxLength"} == SUPPORTED_KEYWORDS


def test_the_test_schemas_use_every_strict_keyword() -> None:
    used = {k for model in MODELS.values() for k in keywords(schema_of(model).schema)}
    assert used == STRICT_KEYWORDS


@pytest.mark.parametrize("name", sorted(MODELS))
async def test_schema_replies_validate(name: str) -> None:
    model = MODELS[name]
    schema = schema_of(model)
    for seed in range(25):
        value = json.loads(await complete(text_request(seed=seed, schema=schema)))
        assert_valid(value, schema.schema)
        model.model_validate(value)  # string lengths too, which the schema cannot say


LIKES = ["Misty coastal landscapes at dawn", "teal and burnt-orange palettes", "cats in sunlight"]
HINTS_USER = (
    "Summarise this taste as broad hints, in a register such as: quiet, intimate, weathered, "
    "luminous, tactile, airy, contemplative.\n\n<do_not_copy>\nLoves:\n- "
    + "\n- ".join(LIKES)
    + "\n</do_not_copy>"
)
REWRITE_USER = (
    f"Concepts (JSON): {json.dumps(['Baroque', 'Bird-Eye View', 'Harbour'])}\n"
    'Return ONLY {"concepts": [...]} with exactly 3 strings, same order.'
)
# (output, user message, what its parse must give)
REAL_OUTPUTS: dict[str, tuple[JsonOutput[Any], str, Callable[[object], bool]]] = {
    "idea_card": (CARD_OUTPUT, USER, lambda v: isinstance(v, IdeaCard)),
    "profile_hints": (hints_output(LIKES), HINTS_USER, lambda v: isinstance(v, ProfileHints)),
    "judge": (
        judge_output(JUDGE_ORDER),
        USER,
        lambda v: isinstance(v, dict) and list(v) == JUDGE_ORDER,
    ),
    "concept_rewrite": (
        concept_rewrite_output(3),
        REWRITE_USER,
        lambda v: v == ("Baroque", "Bird-Eye View", "Harbour"),
    ),
    "concept_rewrite_generated": (
        concept_rewrite_output(3),
        USER,
        lambda v: isinstance(v, tuple) and len(v) == 3,
    ),
}


@pytest.mark.parametrize("name", sorted(REAL_OUTPUTS))
async def test_offline_answers_are_valid_model_answers(name: str) -> None:
    """What the package's own parse accepts, so an offline run never re-asks."""
    output, prompt, expected = REAL_OUTPUTS[name]
    for seed in range(20):
        for temperature in (0.0, 1.0):
            request = text_request(
                (Message("system", "Answer in JSON."), Message("user", prompt)),
                seed=seed,
                temperature=temperature,
                schema=output.schema,
            )
            value = output.parse(await complete(request))
            assert expected(value), value


async def test_idea_card_strings_come_from_the_conversation() -> None:
    card = json.loads(await complete(text_request(schema=IDEA_CARD)))
    words = set(re.findall(r"[a-z']+", USER.lower()))
    assert card["hook"].strip()
    for text in [value for values in card["options"].values() for value in values]:
        assert text.strip()
        assert set(re.findall(r"[a-z']+", text.lower())) <= words, text
    assert len(card["narrative"].split()) >= 5


async def test_judge_scores_name_every_id_once_in_order_and_vary() -> None:
    seen_scores: set[int] = set()
    for seed in range(5):
        scores = json.loads(await complete(text_request(seed=seed, schema=JUDGE)))["scores"]
        assert list(scores) == JUDGE_IDS
        seen_scores.update(scores.values())
    assert len(seen_scores) > 10


def test_id_enum_arrays_shorter_than_the_enum_are_distinct() -> None:
    item = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "enum": JUDGE_IDS},
            "score": {"type": "integer", "minimum": 0, "maximum": 100},
        },
        "required": ["id", "score"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {"scores": {"type": "array", "items": item, "minItems": 3, "maxItems": 4}},
        "required": ["scores"],
        "additionalProperties": False,
    }
    for seed in range(20):
        ids = [s["id"] for s in generate_instance(schema, random.Random(seed))["scores"]]
        assert len(ids) == len(set(ids))
        assert ids == sorted(ids)


# --------------------------------------------------------------------------- the rewrite echo


async def test_rewrite_echoes_the_first_array_of_n_strings_unchanged() -> None:
    kept = ["Café at dusk", 'a "quoted" harbour', "東京 skyline", "tabs\tand\\slashes"]
    prompt = (
        f"Shorter: {json.dumps(['x', 'y'])} and not an array: [1, 2, 3, 4]\n"
        f"Concepts (JSON): {json.dumps(kept, ensure_ascii=False)}\n"
        f"Dislikes (JSON): {json.dumps(['one', 'two', 'three', 'four'])}\n"
        'Return ONLY {"concepts": [...]} with exactly 4 strings, same order.'
    )
    output = concept_rewrite_output(4)
    for seed in range(5):
        for temperature in (0.0, 1.0):
            request = text_request(
                user(prompt), seed=seed, temperature=temperature, schema=output.schema
            )
            text = await complete(request)
            assert json.loads(text) == {"concepts": kept}
            assert output.parse(text) == tuple(kept)


async def test_without_an_array_of_n_strings_the_rewrite_is_generated() -> None:
    prompt = f"Concepts (JSON): {json.dumps(['teal harbour', 'gulls'])}. Keep 3, same order."
    value = json.loads(await complete(text_request(user(prompt), schema=REWRITE)))
    assert list(value) == ["concepts"]
    assert len(value["concepts"]) == 3


@pytest.mark.parametrize(
    "prop",
    [
        # not exactly N: a range of counts
        {"type": "array", "minItems": 2, "maxItems": 4, "items": {"type": "string"}},
        # items that are not free strings
        {"type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "integer"}},
        {
            "type": "array",
            "minItems": 3,
            "maxItems": 3,
            "items": {"type": "string", "enum": ["a", "b", "c"]},
        },
    ],
)
async def test_only_an_exactly_n_string_array_is_echoed(prop: dict[str, Any]) -> None:
    schema = JsonSchema(
        "answer",
        {
            "type": "object",
            "properties": {"concepts": prop},
            "required": ["concepts"],
            "additionalProperties": False,
        },
    )
    prompt = f"Concepts (JSON): {json.dumps(['p', 'q', 'r'])}"
    for seed in range(5):
        value = json.loads(await complete(text_request(user(prompt), seed=seed, schema=schema)))
        assert value["concepts"] != ["p", "q", "r"]
        assert_valid(value, schema.schema)


async def test_a_schema_with_more_than_the_array_is_not_echoed() -> None:
    prompt = f"Concepts (JSON): {json.dumps(['p', 'q', 'r'])}"
    for seed in range(5):
        value = json.loads(await complete(text_request(user(prompt), seed=seed, schema=HINTS)))
        assert_valid(value, HINTS.schema)
        assert value["adjectives"] != ["p", "q", "r"]


async def test_offline_dislike_rewrite_keeps_the_concepts() -> None:
    concepts = ["Baroque", "Bird's-Eye View", "Harbour at dusk"]
    step = dislike_rewrite_step(concepts, ["gore", "clowns", "neon signs"], run_seed=1)
    ctx = Context.with_system("s")
    assert (await ChatRunner(OfflineTextBackend()).root(ctx).ask(step)).value == tuple(concepts)


# --------------------------------------------------------------------------- unsupported schemas

UNSUPPORTED: list[tuple[str, dict[str, Any]]] = [
    ("$ref", {"$ref": "#/$defs/tag"}),
    ("anyOf", {"anyOf": [{"type": "string"}, {"type": "integer"}]}),
    ("oneOf", {"oneOf": [{"type": "string"}, {"type": "integer"}]}),
    ("allOf", {"allOf": [{"type": "string"}]}),
    ("const", {"type": "string", "const": "v1"}),
    ("pattern", {"type": "string", "pattern": "^[a-z]+$"}),
    ("format", {"type": "string", "format": "email"}),
    ("exclusiveMinimum", {"type": "number", "exclusiveMinimum": 0}),
    ("exclusiveMaximum", {"type": "integer", "exclusiveMaximum": 5}),
    ("multipleOf", {"type": "integer", "multipleOf": 5}),
    ("uniqueItems", {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
    ("prefixItems", {"type": "array", "items": {"type": "string"}, "prefixItems": []}),
    ("title", {"type": "string", "title": "Tag"}),
    ("description", {"type": "string", "description": "a tag"}),
    ("default", {"type": "string", "default": "x"}),
]


@pytest.mark.parametrize(("keyword", "fragment"), UNSUPPORTED, ids=[k for k, _ in UNSUPPORTED])
async def test_unsupported_keywords_are_rejected_by_name(
    keyword: str, fragment: dict[str, Any]
) -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["ok", "bad"],
        "properties": {"ok": {"type": "string"}, "bad": fragment},
    }
    with pytest.raises(UnsupportedSchemaError, match=re.escape(repr(keyword))) as info:
        await complete(text_request(schema=JsonSchema("answer", schema)))
    assert isinstance(info.value, RequestRejectedError)
    assert info.value.location == "#/properties/bad"
    assert "#/properties/bad" in str(info.value)


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("$defs", {}),
        ("$schema", "https://json-schema.org/draft/2020-12/schema"),
        ("nullable", True),
    ],
)
def test_unsupported_keywords_are_rejected_at_the_root_and_in_items(
    keyword: str, value: object
) -> None:
    root = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    with pytest.raises(UnsupportedSchemaError, match=re.escape(repr(keyword))) as info:
        check_schema({**root, keyword: value})
    assert info.value.location == "#"
    nested = {
        "type": "object",
        "additionalProperties": False,
        "required": ["xs"],
        "properties": {"xs": {"type": "array", "items": {"type": "string", keyword: value}}},
    }
    with pytest.raises(UnsupportedSchemaError, match=re.escape(repr(keyword))) as info:
        check_schema(nested)
    assert info.value.location == "#/properties/xs/items"


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        pytest.param(
            {"type": ["string", "null"]},
            "'type' must be one of",
            id="type-list",
        ),
        ({"type": "null"}, "'type' must be one of"),
        ({"enum": ["a", "b"]}, "'type' must be one of"),
        ({"type": "string", "enum": []}, "'enum' must be a non-empty list"),
        ({"type": "array"}, "an array needs 'items'"),
        ({"type": "array", "items": [{"type": "string"}]}, "expected a schema object"),
        (
            {"type": "object", "properties": {}, "required": [], "additionalProperties": True},
            "'additionalProperties' must be false",
        ),
        (
            {
                "type": "object",
                "properties": {},
                "required": [],
                "additionalProperties": {"type": "string"},
            },
            "'additionalProperties' must be false",
        ),
        (
            {"type": "object", "properties": {}, "required": ["ghost"]},
            "'required' must name declared properties",
        ),
        ({"type": "integer", "minimum": "0"}, "'minimum' must be a number"),
        ({"type": "array", "items": {"type": "string"}, "minItems": -1}, "'minItems' must be"),
    ],
)
def test_schemas_outside_the_strict_subset_are_rejected(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(UnsupportedSchemaError, match=re.escape(message)):
        check_schema(schema)


def test_unsatisfiable_constraints_raise() -> None:
    with pytest.raises(UnsupportedSchemaError, match="pattern"):
        generate_instance({"type": "string", "pattern": r"^\d{3}-\d{4}$"}, random.Random(0))
    with pytest.raises(UnsupportedSchemaError, match="minItems"):
        check_schema({"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 2})
    with pytest.raises(UnsupportedSchemaError, match="no value"):
        check_schema({"type": "integer", "minimum": 3, "maximum": 2})


# --------------------------------------------------------------------------- plain text rules


async def test_prose_is_readable_and_reuses_a_salient_word() -> None:
    for seed in range(5):
        text = await complete(text_request(seed=seed))
        assert text.strip()
        assert 2 <= len(re.findall(r"[.!?](?:\s|$)", text)) <= 4
        assert {"teal", "harbour", "gulls", "baroque", "dusk", "domes"} & set(
            re.findall(r"[a-z]+", text.lower())
        )


async def test_prose_never_empty_even_without_salient_words() -> None:
    for messages in [(), user("Do it."), (Message("system", "   "),)]:
        assert (await complete(text_request(messages))).strip()


async def test_max_output_tokens_shortens_prose() -> None:
    long = await complete(text_request(seed=1, temperature=1.0))
    short = await complete(text_request(seed=1, temperature=1.0, max_output_tokens=5))
    assert short and len(short) <= len(long)
    assert short.count(". ") == 0


async def test_json_array_in_the_prompt_is_echoed_unchanged() -> None:
    array = '["teal harbour at dusk", "gulls over domes", "lantern light"]'
    prompt = f"Rewrite each line. Return a JSON array of 3 strings, same order: {array}"
    for seed in range(3):
        assert await complete(text_request(user(prompt), seed=seed)) == array


async def test_json_array_of_n_strings_is_generated() -> None:
    prompt = "Return a JSON array of five short strings naming moods for a stormy crimson sea."
    value = json.loads(await complete(text_request(user(prompt))))
    assert isinstance(value, list) and len(value) == 5
    assert all(isinstance(v, str) and v.strip() for v in value)


async def test_title_rule_gives_two_to_four_title_case_words() -> None:
    prompt = (
        "Write a title for this image, 2-4 words, Title Case, no punctuation: a teal harbour "
        "at dusk, gulls circling over baroque domes, lanterns glowing."
    )
    titles = set()
    for seed in range(8):
        title = await complete(text_request(user(prompt), seed=seed))
        words = title.split(" ")
        assert 2 <= len(words) <= 4, title
        assert all(re.fullmatch(r"[A-Z][a-z]+", w) for w in words), title
        titles.add(title)
    assert len(titles) > 1


# --------------------------------------------------------------------------- images


async def render(prompt: str, *, size: str = "1536x1024", seed: int | None = 3) -> Image.Image:
    reply = await OfflineImageBackend().generate(ImageRequest(prompt, size=size, seed=seed))
    assert reply.format == "png" and reply.model == "offline-image-1" and reply.attempts == 1
    image = Image.open(io.BytesIO(reply.data))
    assert image.format == "PNG"
    return image


@pytest.mark.parametrize(
    ("size", "expected"),
    [("1536x1024", (1536, 1024)), ("auto", (1536, 1024)), ("320x480", (320, 480))],
)
async def test_image_is_a_png_of_the_requested_size(size: str, expected: tuple[int, int]) -> None:
    image = await render("a teal harbour at dusk", size=size)
    assert image.size == expected


async def test_palette_words_change_the_dominant_colours() -> None:
    teal = ImageStat.Stat(
        (await render("a teal sea under a teal sky", size="256x256")).convert("RGB")
    )
    crimson = ImageStat.Stat(
        (await render("a crimson sea under a crimson sky", size="256x256")).convert("RGB")
    )
    t_r, t_g, t_b = teal.mean
    c_r, c_g, c_b = crimson.mean
    assert t_g > t_r and t_b > t_r
    assert c_r > c_g and c_r > c_b
    assert c_r - t_r > 50


async def test_same_prompt_and_seed_give_identical_bytes_and_seed_matters() -> None:
    backend = OfflineImageBackend()
    request = ImageRequest("gold and navy spiral", size="512x384", seed=11)
    first, again = await backend.generate(request), await backend.generate(request)
    other = await backend.generate(ImageRequest("gold and navy spiral", size="512x384", seed=12))
    assert first.data == again.data
    assert other.data != first.data


async def test_metadata_records_palette_and_layout() -> None:
    reply = await OfflineImageBackend().generate(
        ImageRequest("Bird's-eye view of ochre fields and an emerald river", size="128x96")
    )
    assert reply.metadata["palette"] == ["ochre", "emerald"]
    assert reply.metadata["palette_source"] == "prompt"
    assert reply.metadata["layout"] == "birds_eye"
    assert reply.metadata["layout_source"] == "prompt"

    plain = await OfflineImageBackend().generate(ImageRequest("a quiet room", size="128x96"))
    assert plain.metadata["palette_source"] == "seeded" and len(plain.metadata["palette"]) >= 2
    assert plain.metadata["layout"] in LAYOUTS


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
async def test_every_layout_renders(layout: str) -> None:
    word = LAYOUTS[layout][0]
    reply = await OfflineImageBackend().generate(ImageRequest(f"{word} in coral", size="160x120"))
    assert reply.metadata["layout"] == layout
    assert Image.open(io.BytesIO(reply.data)).size == (160, 120)


@pytest.mark.parametrize("model", [None, "gpt-image-1", "dall-e-3", "offline-image-1"])
async def test_image_reply_names_the_offline_model_whatever_the_request_asked_for(
    model: str | None,
) -> None:
    # No such model drew the picture, so the reply (and the run's record) must not say so.
    request = ImageRequest("a teal harbour", model=model, size="64x48", seed=1)
    reply = await OfflineImageBackend().generate(request)
    assert reply.model == "offline-image-1"
    assert Image.open(io.BytesIO(reply.data)).size == (64, 48)


@pytest.mark.parametrize("size", ["big", "0x100", "100x99999", "1536 by 1024"])
async def test_malformed_size_is_rejected(size: str) -> None:
    with pytest.raises(RequestRejectedError, match="size"):
        await OfflineImageBackend().generate(ImageRequest("teal", size=size))


@pytest.mark.parametrize("schema", [None, "hints"])
async def test_do_not_copy_sections_never_reach_the_reply(schema: str | None) -> None:
    secret = "Misty coastal landscapes at dawn; teal and burnt-orange palettes; cats in sunlight"
    user = (
        "Summarise the taste below as hints: quiet, intimate, weathered, luminous, airy.\n"
        f"<do_not_copy>\n{secret}\n</do_not_copy>"
    )
    json_schema = HINTS if schema else None
    secret_words = {"misty", "coastal", "landscapes", "dawn", "teal", "burnt", "orange", "cats"}
    for seed in range(20):
        reply = await OfflineTextBackend().complete(
            TextRequest(
                messages=(Message("user", user),),
                temperature=1.0,
                seed=seed,
                json_schema=json_schema,
            )
        )
        words = set(re.findall(r"[a-z]+", (reply.text or "").lower()))
        assert not words & secret_words, reply.text
    # Without the tags the same words are fair game (so the test above can fail).
    reply = await OfflineTextBackend().complete(
        TextRequest(messages=(Message("user", secret),), temperature=1.0, seed=1)
    )
    assert set(re.findall(r"[a-z]+", (reply.text or "").lower())) & secret_words


# --------------------------------------------------------------------------- rubric judges
# Judge requests are built by the scoring stage's own code: the system prompt by
# judge_system_prompt, the user message by the flow's judge prompt function, the schema by
# judge_output, so these tests follow the real prompt format.

RUBRIC_CONCEPTS = ("Baroque cathedral", "Tidal harbour", "Clockwork birds")
RUBRIC_DISLIKES = ("Clowns", "Spiders and insects in close-up")
RUBRIC_BRIEF = Brief(
    concepts=RUBRIC_CONCEPTS,
    preferences=(
        "Likes:\n- Misty coastal mornings\n- Cats dozing in sunlight\n"
        "- Lighthouses and fishing boats\n- Teal and burnt-orange palettes\n\n"
        "Dislikes:\n- " + "\n- ".join(RUBRIC_DISLIKES)
    ),
    dislikes=RUBRIC_DISLIKES,
)
RUBRIC_HINTS = ProfileHints(adjectives=["quiet", "misty", "coastal"], avoid=["no clowns"])
BUILTIN_RUBRICS = ("strict", "novelty_heavy", "profile_fit")
NOVELTY_RUBRIC = RubricSpec(
    name="fresh", source="text", text="- novelty: +0 to +30 for an idea unlike the other cards."
)
NO_NOVELTY = NoveltyState(enabled=False, window=0)
REPO = Path(__file__).resolve().parents[2]


def idea(
    hook: str, narrative: str, composition: Sequence[str] = ("low horizon", "diagonal")
) -> IdeaCard:
    return IdeaCard.model_validate(
        {
            "hook": hook,
            "narrative": narrative,
            "options": {
                "composition": list(composition),
                "palette": ["brass and umber", "pale stone"],
                "medium": ["oil on linen"],
                "mood": ["solemn"],
            },
            "avoid": ["crowds"],
        }
    )


# A copies the concepts' words, B the likes' words, C touches a dislike, D is plain.
PANEL_CARDS = {
    "A": idea(
        "A baroque cathedral rises from a tidal harbour",
        "Clockwork birds circle the baroque cathedral while the tidal harbour drains at dusk; "
        "brass wings catch the last glow above the cathedral domes and the wet harbour stones.",
    ),
    "B": idea(
        "Cats dozing in sunlight on a misty coastal morning",
        "Lighthouses and fishing boats rest in a misty coastal morning while cats doze in "
        "sunlight; teal water and burnt-orange sails frame the quiet shore.",
        ("wide horizon", "centered lighthouse"),
    ),
    "C": idea(
        "A clown juggles spiders in a baroque cathedral",
        "Spiders and insects crawl in close-up over a clown's painted face inside the "
        "baroque cathedral, lit by a single bare bulb.",
        ("close-up", "centered"),
    ),
    "D": idea(
        "A quiet study of an empty stairwell",
        "An empty stairwell winds upward through a plain concrete tower, one window open "
        "to a grey afternoon, nothing moving but the dust in the air.",
    ),
}
PANEL_ORDER = ("C", "A", "D", "B")  # a judge sees the cards shuffled


def judge_request(
    rubric: RubricSpec,
    cards: Mapping[str, IdeaCard] = PANEL_CARDS,
    order: Sequence[str] = PANEL_ORDER,
    *,
    view: ProfileView = "raw",
    novelty: NoveltyState = NO_NOVELTY,
    seed: int | None = 7,
    temperature: float = 0.0,
) -> TextRequest:
    user_text = judge_prompt(order, cards, RUBRIC_BRIEF, novelty.summary, view, RUBRIC_HINTS)
    return TextRequest(
        messages=(Message("system", judge_system_prompt(rubric)), Message("user", user_text)),
        temperature=temperature,
        seed=seed,
        json_schema=judge_output(order).schema,
    )


def generic_answer(request: TextRequest) -> str:
    """The offline answer to a schema request before rubric judges existed: a seeded schema
    instance, from the rng the backend derives from the request."""
    schema = request.json_schema
    assert schema is not None
    seed = _derive_seed(
        "text",
        {
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "model": request.model or "offline-text-1",
            "temperature": request.temperature,
            "seed": request.seed,
            "schema": {"name": schema.name, "schema": schema.schema, "strict": schema.strict},
        },
    )
    units = _salient_units(_last_user_text(request.messages))
    return json.dumps(
        generate_instance(schema.schema, random.Random(seed), units), ensure_ascii=False
    )


async def judge_scores(request: TextRequest) -> dict[str, int]:
    text = await complete(request)
    assert request.json_schema is not None
    order = request.json_schema.schema["properties"]["scores"]["required"]
    scores = judge_output(order).parse(text)
    assert isinstance(scores, dict)
    return scores


def ranking(scores: Mapping[str, int]) -> list[str]:
    return sorted(scores, key=lambda card_id: (-scores[card_id], card_id))


@pytest.mark.parametrize("view", ["raw", "dislikes_only", "hints"])
async def test_default_rubric_judge_answer_is_unchanged(view: ProfileView) -> None:
    default = judge_request(RubricSpec(name="default"), view=view)
    assert "Rubric (" not in default.messages[0].content
    for seed in range(6):
        for temperature in (0.0, 0.7):
            request = judge_request(
                RubricSpec(name="default"), view=view, seed=seed, temperature=temperature
            )
            assert await complete(request) == generic_answer(request)


@pytest.mark.parametrize(
    "text",
    [
        "Be kind to every card.",
        "Start every card at 70, then judge the craft.\n- craft: the more the better.",
    ],
    ids=["no-lines", "no-points"],
)
async def test_a_rubric_without_readable_points_gets_the_generic_answer(text: str) -> None:
    request = judge_request(RubricSpec(name="vague", source="text", text=text))
    assert "Rubric (vague, custom):" in request.messages[0].content
    assert await complete(request) == generic_answer(request)


async def test_only_the_judge_schema_is_answered_by_rubric() -> None:
    request = judge_request(RubricSpec(name="strict"))
    assert request.json_schema is not None
    renamed = JsonSchema("other_scores", request.json_schema.schema)
    other = TextRequest(request.messages, request.temperature, seed=7, json_schema=renamed)
    assert await complete(other) == generic_answer(other)
    assert await complete(request) != generic_answer(request)


async def test_a_rubric_judge_answers_each_card_in_the_form_its_schema_asks() -> None:
    """A card's answer is its score, or an object with the score in its integer property and
    the rationale in its string ones: the reasoned protocol's ``{"rationale", "score"}``, or
    any other such form a protocol's schema asks for."""
    request = judge_request(RubricSpec(name="strict"))
    reasoned = reasoned_output(PANEL_ORDER).schema
    noted = copy.deepcopy(reasoned.schema)
    for node in noted["properties"]["scores"]["properties"].values():
        fields = node["properties"]
        node["properties"] = {"score": fields["score"], "note": fields["rationale"]}
        node["required"] = ["score", "note"]
    for shape, keys in (
        (reasoned, ["rationale", "score"]),
        (JsonSchema("idea_scores", noted), ["score", "note"]),
    ):
        asked = TextRequest(request.messages, request.temperature, seed=7, json_schema=shape)
        value = json.loads(await complete(asked))
        assert_valid(value, shape.schema)
        assert list(value["scores"]) == list(PANEL_ORDER)
        for answer in value["scores"].values():
            assert list(answer) == keys
            text = next(v for k, v in answer.items() if k != "score")
            assert type(answer["score"]) is int and text.startswith("Against the rubric: ")


RUBRICS_UNDER_TEST = [
    *(RubricSpec(name=name) for name in BUILTIN_RUBRICS),
    NOVELTY_RUBRIC,
    RubricSpec(name="sparkle", source="text", text="- sparkle: +0 to +20\n- dislikes: -10 or -40"),
]


@pytest.mark.parametrize("rubric", RUBRICS_UNDER_TEST, ids=lambda r: r.name)
@pytest.mark.parametrize("view", ["raw", "dislikes_only", "hints"])
async def test_rubric_judge_answers_are_valid_judge_answers(
    rubric: RubricSpec, view: ProfileView
) -> None:
    for seed in range(8):
        for temperature in (0.0, 1.0):
            request = judge_request(rubric, view=view, seed=seed, temperature=temperature)
            text = await complete(request)
            assert text != generic_answer(request)
            value = json.loads(text)
            assert list(value["scores"]) == list(PANEL_ORDER)  # the schema's order
            assert all(type(v) is int and 0 <= v <= 100 for v in value["scores"].values())
            assert_valid(value, judge_output(PANEL_ORDER).schema.schema)
            scores = judge_output(PANEL_ORDER).parse(text)
            assert isinstance(scores, dict) and list(scores) == list(PANEL_ORDER)


async def test_rubric_judges_are_deterministic_and_safe_concurrently() -> None:
    requests = [
        judge_request(RubricSpec(name=name), seed=seed, temperature=1.0)
        for name in BUILTIN_RUBRICS
        for seed in range(3)
    ]
    backend = OfflineTextBackend()
    sequential = [(await backend.complete(r)).text for r in requests]
    assert sequential == [(await OfflineTextBackend().complete(r)).text for r in requests]
    concurrent: list[str | None] = [None] * len(requests)

    async def run(i: int) -> None:
        concurrent[i] = (await backend.complete(requests[i])).text

    async with anyio.create_task_group() as tg:
        for i in range(len(requests)):
            tg.start_soon(run, i)
    assert concurrent == sequential


async def test_rubric_judges_do_not_touch_the_global_random() -> None:
    before = random.getstate()  # noqa: TID251
    for rubric in RUBRICS_UNDER_TEST:
        await complete(judge_request(rubric, temperature=1.0))
    assert random.getstate() == before  # noqa: TID251


async def test_the_jitter_is_small_and_seeded() -> None:
    # Only the jitter depends on the seed: at most +-1 at temperature 0, +-3 at 1.
    for temperature, bound in ((0.0, 1), (1.0, 3)):
        runs = [
            await judge_scores(
                judge_request(RubricSpec(name="strict"), seed=seed, temperature=temperature)
            )
            for seed in range(12)
        ]
        for card_id in PANEL_ORDER:
            values = [r[card_id] for r in runs if 0 < r[card_id] < 100]
            if values:
                assert max(values) - min(values) <= 2 * bound + 1, (card_id, values)
        assert len({tuple(r.values()) for r in runs}) > 1


@pytest.mark.parametrize("temperature", [0.0, 1.0])
async def test_built_in_rubrics_disagree_the_way_their_rubrics_say(temperature: float) -> None:
    for seed in range(5):
        panel = {
            name: await judge_scores(
                judge_request(RubricSpec(name=name), seed=seed, temperature=temperature)
            )
            for name in BUILTIN_RUBRICS
        }
        strict, taste = panel["strict"], panel["profile_fit"]
        # strict weighs the concepts, profile_fit the likes.
        assert strict["A"] > strict["B"] + 10, strict
        assert taste["B"] > taste["A"] + 10, taste
        # Both punish the card that touches a dislike hardest.
        assert ranking(strict)[-1] == "C" and ranking(taste)[-1] == "C", panel
        assert strict["C"] < 40 and taste["C"] < 40, panel
        # Not one ordering shared by the whole panel.
        assert len({tuple(ranking(scores)) for scores in panel.values()}) > 1, panel


@pytest.mark.parametrize("view", ["dislikes_only", "hints"])
async def test_dislikes_are_punished_in_every_profile_view(view: ProfileView) -> None:
    for name in ("strict", "profile_fit"):
        scores = await judge_scores(judge_request(RubricSpec(name=name), view=view))
        assert ranking(scores)[-1] == "C", (name, scores)


async def test_hints_view_rewards_the_hinted_taste() -> None:
    # The hints say "quiet, misty, coastal": B uses them, A does not.
    scores = await judge_scores(judge_request(RubricSpec(name="profile_fit"), view="hints"))
    assert scores["B"] > scores["A"], scores


async def test_a_custom_novelty_rubric_ranks_the_most_distinct_card_first() -> None:
    def harbour(word: str) -> IdeaCard:
        return idea(
            f"A lantern-lit harbour with {word} boats at night",
            f"Lanterns sway over the harbour as {word} boats knock together at night and the "
            "keeper walks the pier with a lamp.",
        )

    cards = {
        "A": harbour("fishing"),
        "B": harbour("rowing"),
        "C": idea(
            "A desert observatory under a comet",
            "Astronomers in a sandstone dome track a green comet over the dunes, their "
            "brass telescope tilted toward the rising moon.",
            ("spiral", "symmetry"),
        ),
        "D": harbour("sailing"),
    }
    for seed in range(5):
        request = judge_request(NOVELTY_RUBRIC, cards, ("B", "D", "C", "A"), seed=seed)
        assert "Rubric (fresh, custom):" in request.messages[0].content
        scores = await judge_scores(request)
        assert ranking(scores)[0] == "C", scores
        assert scores["C"] >= max(scores[i] for i in "ABD") + 10, scores


async def test_the_start_sets_the_level_and_rewards_never_pass_100() -> None:
    low = RubricSpec(name="low", source="text", text="Start every card at 10.\n- novelty: +0 to +5")
    high = RubricSpec(
        name="high", source="text", text="Start every card at 95.\n- concepts: +0 to +25"
    )
    low_scores = await judge_scores(judge_request(low))
    high_scores = await judge_scores(judge_request(high))
    assert all(9 <= v <= 16 for v in low_scores.values()), low_scores
    # Twenty-five points above 95 are scaled into the five left: A (all the concepts'
    # words) lands near 100, D (none of them) near 95, nothing is clamped flat.
    assert high_scores["A"] >= 98 and 94 <= high_scores["D"] <= 96, high_scores


async def test_novelty_heavy_takes_points_for_recent_motifs() -> None:
    history = recent_motifs(
        [
            "A lantern over the cathedral harbour, version one.",
            "The harbour below its cathedral, version two.",
            "The cathedral beyond the harbour, version three.",
        ]
    )
    # Never in the same order, so two motifs, each in every prompt.
    assert {"cathedral", "harbour"} <= {m.word for m in history.motifs}
    with_history = NoveltyState(enabled=True, window=3, summary=history)
    rubric = RubricSpec(name="novelty_heavy")
    before = await judge_scores(judge_request(rubric))
    after = await judge_scores(judge_request(rubric, novelty=with_history))
    assert "Recent history:" in judge_request(rubric, novelty=with_history).messages[1].content
    assert before["A"] - after["A"] >= 20  # A reuses two motifs found in every prompt
    assert abs(before["B"] - after["B"]) <= 2  # B uses none (only the jitter differs)


async def test_an_offline_scoring_run_shows_a_panel_that_disagrees(tmp_path: Path) -> None:
    cfg = load_config(
        root=REPO,
        env={},
        overrides=[
            f"image.generation_path={tmp_path / 'images'}",
            f"image.log_path={tmp_path / 'logs'}",
            f"prompt.generations_path={tmp_path / 'generations.csv'}",
            "prompt.random_seed=1234",
            "run.mode=prompt_only",
            "prompt.scoring.enabled=true",
            "prompt.scoring.judges=[{id: strict, rubric: strict}, "
            "{id: warm, rubric: profile_fit}, {id: novel, rubric: novelty_heavy}]",
        ],
    )
    asked: list[tuple[TextRequest, str]] = []

    class Recording(OfflineTextBackend):
        __slots__ = ()

        async def complete(self, request: TextRequest) -> TextReply:
            reply = await super().complete(request)
            if request.json_schema is not None and request.json_schema.name == "idea_scores":
                asked.append((request, reply.text or ""))
            return reply

    backends = Backends(
        text=Recording(),
        image=OfflineImageBackend(),
        provider="offline",
        description="offline",
    )
    await run_generation(cfg, backends)
    (path,) = (tmp_path / "logs").glob("*_transcript.json")
    judges = json.loads(path.read_text(encoding="utf-8"))["blackbox_scoring"]["judges"]
    assert [(j["id"], j["status"], j["rubric"]) for j in judges] == [
        ("strict", "ok", "strict"),
        ("warm", "ok", "profile_fit"),
        ("novel", "ok", "novelty_heavy"),
    ]
    assert len({tuple(ranking(j["scores"])) for j in judges}) > 1, judges
    # Every judge answered by its rubric, not with the generic seeded instance.
    assert len(asked) == 3
    assert all(text != generic_answer(request) for request, text in asked)


# --------------------------------------------------------------------------- the offline badge


@pytest.mark.parametrize(
    "size", [(1536, 1024), (1024, 1536), (200, 600), (96, 288), (64, 64), (48, 48), (32, 32)]
)
async def test_the_offline_badge_never_meets_the_caption_strip(size: tuple[int, int]) -> None:
    width, height = size
    draw = ImageDraw.Draw(Image.new("RGBA", (1, 1)))
    badge = offline_drawing._badge(draw, width, height)
    if badge is None:
        assert height < 45  # only an image too small to hold even the 6 px "offline"
        return
    x0, y0, x1, y1 = offline_drawing._badge_box(badge, width)
    assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height // 3
    for caption in ("#004 - Achievable Share Keeps", "#123 - Turquoise Citadel Beneath Lanterns"):
        assert y1 <= caption_layout(size, caption).strip_top


async def test_the_badge_is_in_the_top_right_corner_and_the_bottom_rows_are_the_picture() -> None:
    request = ImageRequest(prompt="teal and ochre, a calm horizon", size="1024x1536")
    reply = await OfflineImageBackend().generate(request)
    with Image.open(io.BytesIO(reply.data)) as img:
        picture = img.convert("RGB")
    draw = ImageDraw.Draw(Image.new("RGBA", (1, 1)))
    badge = offline_drawing._badge(draw, 1024, 1536)
    assert badge is not None and badge.text == "offline preview"
    x0, y0, x1, y1 = offline_drawing._badge_box(badge, 1024)
    assert (x1, y0) == (1024 - badge.margin, badge.margin)
    # The badge's translucent black box darkens its corner of the picture.
    inside = ImageStat.Stat(picture.crop((x0 + 2, y0 + 2, x1 - 2, y1 - 2))).mean
    left_of_it = ImageStat.Stat(picture.crop((x0 - 60, y0 + 2, x0 - 10, y1 - 2))).mean
    assert sum(inside) < sum(left_of_it)
