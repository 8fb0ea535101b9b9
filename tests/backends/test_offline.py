"""The built-in offline backend: deterministic, schema-valid, readable, and a real picture."""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import math
import random
import re
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from PIL import Image, ImageStat

from image_project.backends.base import (
    ImageBackend,
    ImageRequest,
    JsonSchema,
    Message,
    TextBackend,
    TextReply,
    TextRequest,
)
from image_project.backends.jsonschema_instance import (
    UnsupportedSchemaError,
    check_schema,
    generate_instance,
)
from image_project.backends.offline import (
    LAYOUTS,
    OfflineImageBackend,
    OfflineTextBackend,
)
from image_project.errors import RequestRejectedError

pytestmark = pytest.mark.anyio

USER = (
    "Concepts: Baroque, Bird's-Eye View, Complementary colours. Write one idea card about "
    "a teal harbour at dusk with gulls circling over lantern-lit domes."
)
MESSAGES = (Message("system", "You are a careful art director."), Message("user", USER))


def _strings(items: int) -> dict[str, Any]:
    return {"type": "array", "minItems": items, "items": {"type": "string"}}


IDEA_CARD: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["hook", "narrative", "options", "avoid"],
    "properties": {
        "hook": {"type": "string"},
        "narrative": {"type": "string"},
        "options": {
            "type": "object",
            "additionalProperties": False,
            "required": ["composition", "palette", "medium", "mood"],
            "properties": {
                "composition": _strings(2),
                "palette": _strings(2),
                "medium": _strings(1),
                "mood": _strings(1),
            },
        },
        "avoid": {"type": "array", "items": {"type": "string"}},
    },
}
JUDGE_IDS = ["A", "B", "C", "D", "E", "F"]
JUDGE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["scores"],
    "properties": {
        "scores": {
            "type": "array",
            "minItems": 6,
            "maxItems": 6,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "score"],
                "properties": {
                    "id": {"type": "string", "enum": JUDGE_IDS},
                    "score": {"type": "integer", "minimum": 0, "maximum": 100},
                },
            },
        }
    },
}
REFS_AND_UNIONS: dict[str, Any] = {
    "$defs": {
        "tag": {"type": "string", "minLength": 3, "maxLength": 24, "pattern": "^[A-Za-z' -]+$"},
        "node": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "children"],
            "properties": {
                "name": {"$ref": "#/$defs/tag"},
                "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}},
            },
        },
    },
    "type": "object",
    "additionalProperties": False,
    "required": ["tree", "maybe", "kind", "fixed", "ratio", "count", "flag", "nothing"],
    "properties": {
        "tree": {"$ref": "#/$defs/node"},
        "maybe": {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "null"}]},
        "kind": {"type": ["string", "null"], "enum": ["warm", "cool", None]},
        "fixed": {"const": "v1"},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5},
        "count": {"type": "integer", "minimum": -3, "maximum": 3},
        "flag": {"type": "boolean"},
        "nothing": {"type": "null"},
    },
}
SCHEMAS = {"idea_card": IDEA_CARD, "judge": JUDGE, "refs_and_unions": REFS_AND_UNIONS}


def _validate(value: Any, schema: Any, root: Mapping[str, Any], where: str = "$") -> None:
    """A small validator for the subset the offline backend supports (jsonschema may be absent)."""
    if schema is True:
        return
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#").split("/")[1:]:
            target = target[part]
        _validate(value, target, root, where)
        return
    if "anyOf" in schema:
        errors = []
        for branch in schema["anyOf"]:
            try:
                _validate(value, branch, root, where)
                return
            except AssertionError as exc:
                errors.append(str(exc))
        raise AssertionError(f"{where}: no anyOf branch matched: {errors}")
    if "const" in schema:
        assert value == schema["const"], where
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in enum"
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        checks = {
            "object": lambda v: isinstance(v, dict),
            "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool),
            "null": lambda v: v is None,
        }
        assert any(checks[t](value) for t in types), f"{where}: {value!r} is not {types}"
    if isinstance(value, dict):
        props = schema.get("properties", {})
        assert set(schema.get("required", [])) <= value.keys(), f"{where}: missing keys"
        if schema.get("additionalProperties") is False:
            assert value.keys() <= props.keys(), f"{where}: extra keys"
        for key, sub in value.items():
            if key in props:
                _validate(sub, props[key], root, f"{where}.{key}")
    if isinstance(value, list):
        assert len(value) >= schema.get("minItems", 0), f"{where}: too few items"
        assert len(value) <= schema.get("maxItems", math.inf), f"{where}: too many items"
        for i, item in enumerate(value):
            _validate(item, schema.get("items", True), root, f"{where}[{i}]")
    if isinstance(value, str):
        assert schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", math.inf)
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), f"{where}: {value!r} !~ pattern"
    if isinstance(value, int | float) and not isinstance(value, bool):
        assert value >= schema.get("minimum", -math.inf), where
        assert value <= schema.get("maximum", math.inf), where
        assert value > schema.get("exclusiveMinimum", -math.inf), where
        assert value < schema.get("exclusiveMaximum", math.inf), where


def assert_valid(value: Any, schema: Mapping[str, Any]) -> None:
    _validate(value, schema, schema)
    if importlib.util.find_spec("jsonschema") is not None:  # a second opinion when installed
        importlib.import_module("jsonschema").validate(value, schema)


def text_request(
    messages: tuple[Message, ...] = MESSAGES,
    *,
    seed: int | None = 7,
    temperature: float = 0.9,
    schema: Mapping[str, Any] | None = None,
    max_output_tokens: int | None = None,
) -> TextRequest:
    return TextRequest(
        messages=messages,
        temperature=temperature,
        seed=seed,
        json_schema=None if schema is None else JsonSchema("answer", schema),
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
async def test_same_request_gives_the_same_reply(schema: Mapping[str, Any] | None) -> None:
    first = await complete(text_request(schema=schema))
    again = await OfflineTextBackend().complete(text_request(schema=schema))
    assert again.text == first


@pytest.mark.parametrize("schema", [None, IDEA_CARD, JUDGE], ids=["prose", "card", "judge"])
async def test_different_seeds_give_different_replies(schema: Mapping[str, Any] | None) -> None:
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
    generate_instance(IDEA_CARD, random.Random(1), ["teal harbour"])
    assert random.getstate() == before  # noqa: TID251


# --------------------------------------------------------------------------- structured output


@pytest.mark.parametrize("name", sorted(SCHEMAS))
async def test_schema_replies_validate(name: str) -> None:
    schema = SCHEMAS[name]
    for seed in range(25):
        value = json.loads(await complete(text_request(seed=seed, schema=schema)))
        assert_valid(value, schema)


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
    schema = json.loads(json.dumps(JUDGE))
    schema["properties"]["scores"].update(minItems=3, maxItems=4)
    for seed in range(20):
        ids = [s["id"] for s in generate_instance(schema, random.Random(seed))["scores"]]
        assert len(ids) == len(set(ids))
        assert ids == sorted(ids)


@pytest.mark.parametrize(
    ("fragment", "keyword"),
    [
        ({"type": "string", "format": "email"}, "format"),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "oneOf"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
        ({"type": "integer", "multipleOf": 5}, "multipleOf"),
        ({"$ref": "https://example.com/schema.json"}, "local"),
    ],
)
async def test_unsupported_keywords_raise_a_clear_error(
    fragment: dict[str, Any], keyword: str
) -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["ok", "bad"],
        "properties": {"ok": {"type": "string"}, "bad": {"anyOf": [{"type": "null"}, fragment]}},
    }
    with pytest.raises(UnsupportedSchemaError, match=keyword) as info:
        await complete(text_request(schema=schema))
    assert isinstance(info.value, RequestRejectedError)
    assert info.value.location == "#/properties/bad/anyOf/1"
    assert "#/properties/bad/anyOf/1" in str(info.value)


def test_unsatisfiable_constraints_raise() -> None:
    with pytest.raises(UnsupportedSchemaError, match="pattern"):
        generate_instance({"type": "string", "pattern": r"^\d{3}-\d{4}$"}, random.Random(0))
    with pytest.raises(UnsupportedSchemaError, match="minItems"):
        check_schema({"type": "array", "minItems": 3, "maxItems": 2})
    with pytest.raises(UnsupportedSchemaError, match="no value"):
        check_schema({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2})


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
    json_schema = (
        JsonSchema(
            "hints",
            {
                "type": "object",
                "properties": {
                    "adjectives": {"type": "array", "items": {"type": "string"}, "minItems": 6}
                },
                "required": ["adjectives"],
                "additionalProperties": False,
            },
        )
        if schema
        else None
    )
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
