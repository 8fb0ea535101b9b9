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
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import anyio
import pytest
from PIL import Image, ImageStat
from pydantic import BaseModel, ConfigDict, Field

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
from image_project.backends.jsonschema_instance import (
    SUPPORTED_KEYWORDS,
    UnsupportedSchemaError,
    check_schema,
    generate_instance,
)
from image_project.backends.offline import (
    LAYOUTS,
    OfflineImageBackend,
    OfflineTextBackend,
)
from image_project.engine import ChatRunner, Context
from image_project.engine.output import JsonOutput, strict_json_schema
from image_project.errors import RequestRejectedError
from image_project.record import IdeaCard
from image_project.stages.scoring.cards import CARD_OUTPUT
from image_project.stages.scoring.hints import ProfileHints, hints_output
from image_project.stages.scoring.judges import judge_output
from image_project.stages.standard import (
    CONCEPTS_KEY,
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


def test_supported_keywords_are_the_strict_keywords() -> None:
    assert SUPPORTED_KEYWORDS == STRICT_KEYWORDS


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
REAL_OUTPUTS: dict[str, tuple[JsonOutput, str, Callable[[object], bool]]] = {
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
        assert [s["id"] for s in scores] == JUDGE_IDS
        seen_scores.update(s["score"] for s in scores)
    assert len(seen_scores) > 10


def test_id_enum_arrays_shorter_than_the_enum_are_distinct() -> None:
    schema = copy.deepcopy(dict(JUDGE.schema))
    schema["properties"]["scores"].update(minItems=3, maxItems=4)
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
    await ChatRunner(OfflineTextBackend()).run(ctx, step)
    assert ctx.outputs[CONCEPTS_KEY] == tuple(concepts)


# --------------------------------------------------------------------------- unsupported schemas

UNSUPPORTED: list[tuple[str, dict[str, Any]]] = [
    ("$ref", {"$ref": "#/$defs/tag"}),
    ("anyOf", {"anyOf": [{"type": "string"}, {"type": "integer"}]}),
    ("oneOf", {"oneOf": [{"type": "string"}, {"type": "integer"}]}),
    ("allOf", {"allOf": [{"type": "string"}]}),
    ("const", {"type": "string", "const": "v1"}),
    ("pattern", {"type": "string", "pattern": "^[a-z]+$"}),
    ("minLength", {"type": "string", "minLength": 3}),
    ("maxLength", {"type": "string", "maxLength": 24}),
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
