"""How a step's answer is read (``image_project.engine.output``): strict JSON schemas generated
from pydantic models, ``JsonOutput`` / ``TextOutput`` parsing, ``ReaskPolicy`` checks, the
definition errors of a ``ChatStep`` that re-asks without an output, and how the runner sends
the schema and re-asks a rejected answer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import pytest
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StringConstraints,
    ValidationError,
    create_model,
    model_validator,
)

from image_project.backends.base import GRAMMAR_KEYWORDS, STRICT_KEYWORDS, JsonSchema, TextRequest
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.output import (
    JsonOutput,
    ReaskPolicy,
    TextOutput,
    default_reask,
    describe_validation_error,
    extract_json_object,
    has_json_object,
    list_of,
    literal_of,
    looks_like_refusal,
    strict_json_schema,
)
from image_project.engine.runner import ChatRunner
from image_project.errors import ModelOutputError, PipelineDefinitionError, RefusalError
from image_project.record.events import ChatEvent
from image_project.testing import FunctionTextBackend, ScriptedTextBackend, last_user_text

# -- answer models ------------------------------------------------------------------------


class Swatch(BaseModel):
    """A named colour weight (this description must not reach the schema)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, StringConstraints(min_length=1, max_length=20)] = Field(
        title="Swatch name", description="what the colour is called"
    )
    weight: int = Field(ge=0, le=10)


class Palette(BaseModel):
    """A palette answer: nested models (``$ref``s), annotations, defaults, lengths."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="test_palette")

    title: str = Field(description="a headline", examples=["Dawn"])
    swatches: list[Swatch] = Field(min_length=1, max_length=3)
    mood: Literal["calm", "loud"]
    notes: list[str] = Field(default_factory=list, max_length=2)
    main: Swatch

    @model_validator(mode="after")
    def _distinct(self) -> Palette:
        names = [s.name for s in self.swatches]
        if len(set(names)) != len(names):
            raise ValueError("swatch names must differ")
        return self


SWATCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "weight": {"type": "integer", "minimum": 0, "maximum": 10},
    },
    "required": ["name", "weight"],
    "additionalProperties": False,
}

PALETTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "swatches": {"type": "array", "items": SWATCH_SCHEMA, "minItems": 1, "maxItems": 3},
        "mood": {"type": "string", "enum": ["calm", "loud"]},
        "notes": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "main": SWATCH_SCHEMA,
    },
    "required": ["title", "swatches", "mood", "notes", "main"],
    "additionalProperties": False,
}

GOOD = {
    "title": "Dawn",
    "swatches": [{"name": "teal", "weight": 3}, {"name": "rose", "weight": 7}],
    "mood": "calm",
    "notes": [],
    "main": {"name": "teal", "weight": 3},
}
GOOD_TEXT = json.dumps(GOOD)


def _walk(node: Any) -> list[Mapping[str, Any]]:
    """Every schema object in ``node`` (the node itself, its properties and items)."""
    out = [node]
    for sub in node.get("properties", {}).values():
        out.extend(_walk(sub))
    if "items" in node:
        out.extend(_walk(node["items"]))
    return out


# -- strict_json_schema -------------------------------------------------------------------


def test_strict_schema_is_generated_from_the_model() -> None:
    schema = strict_json_schema(Palette)
    assert isinstance(schema, JsonSchema)
    assert schema.name == "test_palette" and schema.strict
    assert json.loads(json.dumps(schema.schema)) == PALETTE_SCHEMA


def test_every_object_requires_all_properties_and_forbids_others() -> None:
    nodes = _walk(strict_json_schema(Palette).schema)
    objects = [n for n in nodes if n.get("type") == "object"]
    assert len(objects) == 3  # the palette and its two inlined swatches
    for node in objects:
        assert node["required"] == list(node["properties"])
        assert node["additionalProperties"] is False


def test_refs_are_inlined_and_only_strict_keywords_remain() -> None:
    schema = strict_json_schema(Palette).schema
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text
    for node in _walk(schema):
        assert set(node) <= STRICT_KEYWORDS, set(node) - STRICT_KEYWORDS
    # Annotations and string lengths are dropped; a field named "title" is still a field.
    for dropped in ("description", "examples", "default", "minLength", "maxLength"):
        assert f'"{dropped}"' not in text
    assert "title" in schema["properties"]
    assert all("title" not in node for node in _walk(schema))


def test_the_grammar_dialect_keeps_string_lengths_and_patterns() -> None:
    """The grammar dialect is the strict schema plus minLength / maxLength / pattern; the
    strict one drops them (the answer is still checked against them locally)."""
    out = strict_json_schema(WithPattern)
    assert out.schema["properties"]["code"] == {"type": "string"}
    assert out.grammar is not None
    assert out.grammar["properties"]["code"] == {"type": "string", "pattern": "^[A-Z]+$"}
    palette = strict_json_schema(Palette)
    assert palette.grammar is not None
    for node in _walk(palette.grammar):
        assert set(node) <= GRAMMAR_KEYWORDS, set(node) - GRAMMAR_KEYWORDS
    assert '"maxLength"' in json.dumps(palette.grammar)
    with pytest.raises(ValueError, match="pattern"):
        JsonOutput[WithPattern](WithPattern).parse('{"code": "abc"}')


def test_a_field_with_a_default_is_still_required_in_the_schema() -> None:
    """Strict mode needs every key; the model still accepts the answer without it."""
    assert "notes" in strict_json_schema(Palette).schema["required"]
    value = JsonOutput[Palette](Palette).parse(
        json.dumps({k: v for k, v in GOOD.items() if k != "notes"})
    )
    assert isinstance(value, Palette) and value.notes == []


def test_schema_name_defaults_to_the_class_name() -> None:
    assert strict_json_schema(Swatch).name == "Swatch"


def test_models_built_at_run_time_use_literal_of_and_list_of() -> None:
    item = create_model("Pick", __base__=Swatch, name=(literal_of(["x", "y"]), ...))
    answer = create_model("Answer", picks=(list_of(item), Field(min_length=2, max_length=2)))
    schema = strict_json_schema(answer).schema
    picks = schema["properties"]["picks"]
    assert picks["items"]["properties"]["name"] == {"type": "string", "enum": ["x", "y"]}
    assert picks["minItems"] == picks["maxItems"] == 2
    with pytest.raises(PipelineDefinitionError, match="at least one value"):
        literal_of([])


class WithOptional(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    note: str | None


class WithUnion(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    value: int | str


class WithPattern(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    code: str = Field(pattern=r"^[A-Z]+$")


class WithExclusive(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    count: int = Field(gt=0)


class WithTuple(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    pair: tuple[int, int]


class Outer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", title="outer_answer")
    items: list[WithOptional]


class TreeNode(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    children: list[TreeNode]


class NotAnObject(RootModel[list[int]]):
    pass


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (WithOptional, "WithOptional.note: the keyword 'anyOf' is not supported"),
        (WithUnion, "WithUnion.value: the keyword 'anyOf' is not supported"),
        (WithExclusive, "WithExclusive.count: the keyword 'exclusiveMinimum' is not supported"),
        (WithTuple, "WithTuple.pair: the keyword 'prefixItems' is not supported"),
        (Outer, r"outer_answer\.items\[\]\.note: the keyword 'anyOf'"),
        (TreeNode, r"TreeNode\.children\[\]: \$ref '#/\$defs/TreeNode' is recursive"),
        (NotAnObject, "NotAnObject: the root of an answer schema must be an object"),
    ],
    ids=["optional", "union", "exclusive", "tuple", "nested", "recursive", "root"],
)
def test_unsupported_constructs_are_rejected_naming_model_and_field(
    model: type[BaseModel], message: str
) -> None:
    with pytest.raises(PipelineDefinitionError, match=message):
        strict_json_schema(model)
    with pytest.raises(PipelineDefinitionError, match=message):
        JsonOutput(model)


class OneValue(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["only"]


def test_a_one_value_literal_is_an_enum_of_one() -> None:
    """pydantic writes ``Literal["only"]`` as ``const``; strict schemas say ``enum`` (a judge
    of one card lists its one id)."""
    schema = strict_json_schema(OneValue).schema
    assert schema["properties"]["kind"] == {"type": "string", "enum": ["only"]}
    assert strict_json_schema(create_model("One", kind=(literal_of(["A"]), ...))).schema[
        "properties"
    ]["kind"] == {"type": "string", "enum": ["A"]}


class WithDict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    counts: dict[str, int]


class AllowsExtra(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")
    a: int


@pytest.mark.parametrize("model", [WithDict, AllowsExtra], ids=["dict-field", "extra-allow"])
def test_open_objects_are_rejected(model: type[BaseModel]) -> None:
    with pytest.raises(PipelineDefinitionError, match="additionalProperties"):
        strict_json_schema(model)


# -- JsonOutput.parse ---------------------------------------------------------------------


def test_json_output_holds_the_strict_schema_of_its_model() -> None:
    output = JsonOutput[Palette](Palette)
    assert output.schema == strict_json_schema(Palette)
    assert output.label == "test palette"
    assert JsonOutput(Palette, what="palette").label == "palette"


@pytest.mark.parametrize(
    "text",
    [GOOD_TEXT, f"  {GOOD_TEXT}\n", f"```json\n{GOOD_TEXT}\n```", f"```\n{GOOD_TEXT}\n```"],
    ids=["bare", "whitespace", "json-fence", "fence"],
)
def test_json_output_parses_a_valid_answer_into_the_model(text: str) -> None:
    value = JsonOutput[Palette](Palette).parse(text)
    assert value == Palette.model_validate(GOOD)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            {**GOOD, "extra": 1},
            r"^invalid test palette: \(top level\): a key that is not in the schema \(not allowed\)$",
        ),
        ({k: v for k, v in GOOD.items() if k != "mood"}, "mood: required key is missing"),
        ({**GOOD, "mood": "sad"}, "invalid test palette: mood: Input should be 'calm' or 'loud'"),
        (
            {**GOOD, "main": {"name": "x" * 21, "weight": 1}},
            "main.name: String should have at most 20 characters",
        ),
        (
            {**GOOD, "swatches": [{"name": "a", "weight": 1}] * 2},
            "^invalid test palette: swatch names must differ$",
        ),
    ],
    ids=["extra-key", "missing-key", "bad-enum", "string-length", "model-validator"],
)
def test_json_output_rejects_an_invalid_answer_saying_why(
    answer: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        JsonOutput(Palette).parse(json.dumps(answer))
    assert type(info.value) is ValueError


def test_json_output_rejects_prose_around_the_object() -> None:
    with pytest.raises(ValueError, match="ONLY the JSON object") as info:
        JsonOutput(Palette).parse(f"Here you go: {GOOD_TEXT}")
    assert type(info.value) is ValueError


def test_check_runs_after_validation_and_may_replace_or_reject_the_value() -> None:
    def names(palette: Palette) -> list[str]:
        if palette.mood == "loud":
            raise ValueError("the palette must be calm")
        return [s.name for s in palette.swatches]

    output = JsonOutput(Palette, check=names)
    assert output.parse(GOOD_TEXT) == ["teal", "rose"]
    with pytest.raises(ValueError, match=r"^the palette must be calm$"):
        output.parse(json.dumps({**GOOD, "mood": "loud"}))
    calls: list[object] = []
    with pytest.raises(ValueError, match="mood"):
        JsonOutput(Palette, check=calls.append).parse(json.dumps({**GOOD, "mood": 3}))
    assert calls == []  # an answer the model rejects never reaches the check


REFUSAL = "I'm sorry, but I can't help with that request."


def test_a_refusal_is_a_refusal_error_only_when_refusals_are_on() -> None:
    with pytest.raises(RefusalError, match="declined to give the test palette") as info:
        JsonOutput(Palette, refusals=True).parse(REFUSAL)
    assert info.value.reason == "refused" and info.value.output == REFUSAL
    with pytest.raises(ValueError) as plain:
        JsonOutput(Palette).parse(REFUSAL)
    assert type(plain.value) is ValueError


def test_an_apology_around_a_json_object_is_malformed_not_a_refusal() -> None:
    with pytest.raises(ValueError) as info:
        JsonOutput(Palette, refusals=True).parse(f"I'm sorry, here it is: {GOOD_TEXT}")
    assert type(info.value) is ValueError


def test_refusal_heuristics() -> None:
    assert looks_like_refusal("As an AI, I cannot do that")
    assert looks_like_refusal("I can\u2019t draw that")
    assert not looks_like_refusal("Sure! Here is the palette.")
    assert not looks_like_refusal("x" * 300 + " I'm sorry")  # only the first 300 characters
    assert has_json_object('text {"a": 1} text')
    assert not has_json_object("} backwards {")
    assert not has_json_object("no braces")


# -- extract_json_object and describe_validation_error ------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('\n ```json\n{"a": [1, {"b": null}]}\n``` \n', {"a": [1, {"b": None}]}),
        ('```JSON \r\n{"a": "x"}\r\n  ```', {"a": "x"}),
    ],
)
def test_extract_json_object_accepts_the_object_alone_or_in_one_fence(
    text: str, expected: dict[str, Any]
) -> None:
    assert extract_json_object(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the answer is empty"),
        ("```json\n\n```", "the answer is empty"),
        ("no json here", r"found no \{\.\.\.\}"),
        ('Sure: {"a": 1}', "ONLY the JSON object"),
        ('{"a": 1} hope this helps', "ONLY the JSON object"),
        ('[{"a": 1}]', "ONLY the JSON object"),
        ('{"a": 1, "a": 2}', r"a key appears twice in one JSON object \(duplicate keys\)"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": 1,}', "not valid JSON"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"a": ' + "1" * 5_000 + "}", "more than 4300 digits"),
    ],
)
def test_extract_json_object_rejects_everything_else_with_a_plain_value_error(
    text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        extract_json_object(text)
    assert type(info.value) is ValueError


def test_describe_validation_error_lists_a_few_problems_and_counts_the_rest() -> None:
    class Many(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        a: int
        b: int
        c: int

    with pytest.raises(ValidationError) as info:
        Many.model_validate({"a": "x", "b": "y", "d": 1})
    assert describe_validation_error(info.value, limit=2) == (
        "a: Input should be a valid integer, unable to parse string as an integer; "
        "b: Input should be a valid integer, unable to parse string as an integer; "
        "... and 2 more"
    )
    full = describe_validation_error(info.value)
    assert "c: required key is missing" in full
    assert "(top level): a key that is not in the schema (not allowed)" in full
    assert "d:" not in full and "'d'" not in full  # the extra key is not named


# -- ReaskPolicy and the ChatStep definition checks --------------------------------------


def test_reask_policy_defaults() -> None:
    policy = ReaskPolicy()
    assert (policy.max, policy.style, policy.prompt, policy.fallback) == (
        0,
        "conversation",
        default_reask,
        None,
    )
    assert "bad key" in default_reask("bad key")


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2", None])
def test_reask_policy_max_must_be_a_non_negative_int(bad: object) -> None:
    with pytest.raises(PipelineDefinitionError, match=r"ReaskPolicy\.max must be an int >= 0"):
        ReaskPolicy(max=bad)  # type: ignore[arg-type]


def test_reask_policy_style_is_checked() -> None:
    with pytest.raises(PipelineDefinitionError, match=r"ReaskPolicy\.style"):
        ReaskPolicy(style="loud")  # type: ignore[arg-type]


def test_a_step_with_a_fallback_but_no_output_is_rejected() -> None:
    reask = ReaskPolicy(fallback=lambda text, exc: text)
    with pytest.raises(PipelineDefinitionError, match="a fallback needs an output"):
        ChatStep(name="s", prompt="p", temperature=0, reask=reask)
    ChatStep(name="s", prompt="p", temperature=0, reask=reask, output=TextOutput(str))
    # Re-asks without an output are allowed: only a cut-off answer is re-asked then.
    ChatStep(name="s", prompt="p", temperature=0, reask=ReaskPolicy(max=1))


def test_a_step_checks_the_types_of_output_and_reask() -> None:
    with pytest.raises(
        PipelineDefinitionError, match="output must be a JsonOutput or a TextOutput"
    ):
        ChatStep(prompt="p", temperature=0, output=Palette)  # type: ignore[arg-type]
    with pytest.raises(PipelineDefinitionError, match="reask must be a ReaskPolicy"):
        ChatStep(prompt="p", temperature=0, output=TextOutput(str), reask=2)  # type: ignore[arg-type]
    ChatStep(prompt="p", temperature=0)  # no output, no re-asks: fine


# -- through the runner -------------------------------------------------------------------


def _chat(ctx: Context) -> ChatEvent:
    (event,) = ctx.steps
    assert isinstance(event, ChatEvent)
    return event


@pytest.mark.anyio
async def test_json_output_schema_is_sent_and_the_model_is_captured() -> None:
    output = JsonOutput[Palette](Palette)
    backend = ScriptedTextBackend([GOOD_TEXT])
    ctx = Context()
    step = ChatStep(name="p", prompt="a palette", temperature=0, output=output)
    value = (await ChatRunner(backend).root(ctx).ask(step)).value
    assert backend.requests[0].json_schema == strict_json_schema(Palette)
    assert value == Palette.model_validate(GOOD)
    assert _chat(ctx).response == GOOD_TEXT  # the record keeps the answer's text
    assert ctx.messages[-1].content == GOOD_TEXT


@pytest.mark.anyio
async def test_a_text_output_or_no_output_sends_no_schema() -> None:
    backend = FunctionTextBackend(lambda r: "12")
    for output in (TextOutput(int), None):
        await (
            ChatRunner(backend)
            .root(Context())
            .ask(ChatStep(prompt="n", temperature=0, output=output))
        )
    assert [r.json_schema for r in backend.requests] == [None, None]


@pytest.mark.anyio
async def test_an_invalid_json_answer_is_reasked_with_the_validation_error() -> None:
    bad = json.dumps({**GOOD, "mood": "sad"})
    backend = ScriptedTextBackend([bad, GOOD_TEXT])
    ctx = Context()
    step: ChatStep[Any] = ChatStep(
        name="p",
        prompt="a palette",
        temperature=0,
        output=JsonOutput(Palette),
        reask=ReaskPolicy(max=1),
    )
    value = (await ChatRunner(backend).root(ctx).ask(step)).value
    backend.assert_all_used()
    assert isinstance(value, Palette)
    reask: TextRequest = backend.requests[1]
    assert reask.json_schema == strict_json_schema(Palette)
    assert "invalid test palette: mood: Input should be 'calm' or 'loud'" in last_user_text(reask)
    record = _chat(ctx)
    assert [r.response for r in record.reasks] == [bad]
    assert record.reasks[0].error.startswith("invalid test palette: mood:")
    assert record.answers == 2


@pytest.mark.anyio
async def test_a_json_refusal_is_never_reasked() -> None:
    backend = ScriptedTextBackend([REFUSAL])
    step: ChatStep[Any] = ChatStep(
        name="p",
        prompt="a palette",
        temperature=0,
        output=JsonOutput(Palette, refusals=True),
        reask=ReaskPolicy(max=3),
    )
    with pytest.raises(RefusalError, match="p: the model declined"):
        await ChatRunner(backend).root(Context()).ask(step)
    assert len(backend.requests) == 1


@pytest.mark.anyio
async def test_a_json_answer_still_invalid_after_the_reasks_is_a_model_output_error() -> None:
    backend = FunctionTextBackend(lambda r: "not json")
    step: ChatStep[Any] = ChatStep(
        name="p",
        prompt="a palette",
        temperature=0,
        output=JsonOutput(Palette),
        reask=ReaskPolicy(max=2),
    )
    with pytest.raises(ModelOutputError, match="after 3 attempt") as info:
        await ChatRunner(backend).root(Context()).ask(step)
    assert info.value.reason == "invalid_output" and len(backend.requests) == 3
