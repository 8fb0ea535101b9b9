"""Property tests of the config loader, and the "absurd value" guarantee.

The contract under test (``image_project.config``): whatever the config file holds (any
bytes, any YAML document) and whatever ``--set`` items are given, :func:`load_config`
returns a valid :class:`AppConfig` or raises ONE :class:`ConfigError`, before anything else
runs; a ``ConfigError`` about a key names its full dotted path. Every number and string has
a bound, so an absurd value (``run.runs=1000000000``, a 10**40 seed, a 100000x100000 image)
is a ``ConfigError`` naming the key and the allowed range, and the CLI exits 2 on it.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from image_project.cli.command import main
from image_project.config.fields import IMAGE_SIDE_MAX, MAX_NAME_CHARS, MAX_PATH_CHARS, MAX_RUN_SEED
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import ConfigError
from tests.faults.common import write_config

REPO = Path(__file__).resolve().parents[2]


# -- helpers ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project root for every example (a function-scoped tmp_path would be shared
    between a test's examples anyway); each example rewrites ``config.yaml`` in it."""
    return tmp_path_factory.mktemp("config_properties")


def _load(root: Path, content: bytes | str, overrides: list[str] | None = None) -> AppConfig:
    path = root / "config.yaml"
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return load_config(root=root, config_path=path, overrides=overrides or [], env={})


def _load_or_config_error(
    root: Path, content: bytes | str, overrides: list[str] | None = None
) -> AppConfig | ConfigError:
    """The loaded config or the ConfigError; any other exception fails the test."""
    try:
        config = _load(root, content, overrides)
    except ConfigError as exc:
        assert str(exc) == (f"{exc.key}: {exc.message}" if exc.key else exc.message)
        assert exc.message.strip()
        return exc
    assert isinstance(config, AppConfig)
    _assert_nothing_absurd(config.model_dump())
    return config


def _assert_nothing_absurd(value: object, where: str = "") -> None:
    """A config that loaded holds only bounded numbers and strings."""
    if isinstance(value, dict):
        for key, child in value.items():
            _assert_nothing_absurd(child, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, child in enumerate(value):
            _assert_nothing_absurd(child, f"{where}[{index}]")
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        assert 0 <= value <= MAX_RUN_SEED, where
    elif isinstance(value, float):
        assert math.isfinite(value) and 0 <= value <= 3600, where
    elif isinstance(value, Path):  # at most MAX_PATH_CHARS, then anchored at the root
        assert len(str(value)) <= 2 * MAX_PATH_CHARS, where
    elif isinstance(value, str):
        assert len(value) <= MAX_PATH_CHARS, where


def _first_segment(key: str) -> str:
    return re.split(r"[.\[]", key, maxsplit=1)[0]


def _real_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths: list[str] = []
    for name, field in model.model_fields.items():
        if name == "sources":
            continue
        path = f"{prefix}{name}"
        paths.append(path)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths.extend(_real_paths(annotation, f"{path}."))
    return paths


REAL_PATHS = _real_paths(AppConfig)
FAKE_PATHS = ["backend.max_concurency", "run.rusn", "prompt.scoring.judges.id", "sources", "x.y"]

# -- strategies -----------------------------------------------------------------------------

_PLAUSIBLE = [
    "auto", "openai", "offline", "full", "prompt_only", "concurrent", "sequential", "final",
    "per_stage", "none", "low", "high", "1536x1024", "16x16", "4096x4096", "100000x100000",
    "0x0", "true", "false", "yes", "maybe", "null", "http://localhost:1", "ftp://x",
    "OPENAI_API_KEY", "sk-abc123", "$HOME/x", "${NOPE}/x", "~/x", "~nosuchuser_xyz/x",
    "a.csv", "", " ", "gpt-4.1-mini", "judge-1", "1e308", ".inf", "-1",
]  # fmt: skip
_ABSURD_NUMBERS: list[int | float] = [
    10**12, 10**30, 10**40, 2**63, 2**63 - 1, 2**64, -1, -(10**30), 1e308, -1e308,
    math.inf, -math.inf, math.nan, 5e-324,
]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 300),
    st.integers(),
    st.sampled_from(_ABSURD_NUMBERS),
    st.floats(),
    st.sampled_from(_PLAUSIBLE),
    st.text(max_size=20),
    st.integers(0, MAX_PATH_CHARS + 10).map(lambda n: "x" * n),
)
keys = st.one_of(
    st.sampled_from([path.rsplit(".", 1)[-1] for path in REAL_PATHS]),
    st.text(max_size=8),
    st.integers(-2, 2),
    st.none(),
    st.booleans(),
)
judge_lists = st.lists(
    st.fixed_dictionaries(
        {"id": st.sampled_from(["a", "b", "judge-1", ""]) | scalars},
        optional={"model": scalars, "temperature": scalars, "extra": scalars},
    ),
    max_size=20,
)
values = st.one_of(
    scalars,
    judge_lists,
    st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3)
        ),
        max_leaves=8,
    ),
)


def _put(doc: dict[Any, Any], parts: list[str], value: object) -> None:
    node = doc
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


@st.composite
def documents(draw: st.DrawFn) -> dict[Any, Any]:
    """A document over real and misspelt dotted keys, with random values (and a few random
    extra keys, some not strings)."""
    doc: dict[Any, Any] = {}
    for path in draw(st.lists(st.sampled_from(REAL_PATHS + FAKE_PATHS), max_size=8)):
        _put(doc, path.split("."), draw(values))
    if draw(st.booleans()):
        section = draw(st.sampled_from(["backend", "run", "prompt", "image"]))
        extra = draw(st.dictionaries(keys, values, max_size=2))
        target = doc.setdefault(section, {})
        if isinstance(target, dict):
            target.update(extra)
    return doc


def _serialise(doc: dict[Any, Any], as_json: bool) -> str:
    if as_json:
        return json.dumps(doc)  # JSON is YAML
    return yaml.safe_dump(doc)


# Text a user might put after '=' in --set: YAML flow values, huge and odd numbers, dates.
override_values = st.one_of(
    st.text(max_size=30),
    values.map(lambda v: yaml.safe_dump(v, default_flow_style=True, width=10**9).strip()),
    st.integers(1, 5_000).map(lambda n: "9" * n),
    st.integers(1, 1_500).map(lambda n: "0x" + "f" * n),
    st.integers(1, 2_000).map(lambda n: ":".join(["59"] * n)),
    st.integers(1, 1_200).map(lambda n: "[" * n),
    st.sampled_from(["2001-13-01", "2001-02-30 25:61:00", "!!binary '/w=='", "!!python/int 1"]),
    st.sampled_from(["{a: 1, a: 2}", "&a [*a]", "*nope", "? [1]\n: 2", "<<: 1", "=", "%YAML"]),
)
overrides = st.one_of(
    st.text(max_size=40),
    st.tuples(st.integers(1, 3_000).map(lambda n: "run" + ".a" * n), override_values).map("=".join),
    st.tuples(st.sampled_from(REAL_PATHS + FAKE_PATHS), override_values).map("=".join),
    st.tuples(st.text(max_size=10), override_values).map("=".join),
)


# -- properties ---------------------------------------------------------------------------


@given(documents(), st.booleans())
@example({1: 2}, False)  # regression: a non-string key reported as the list item "[1]"
@example({"prompt": {"scoring": {"judges": [{"id": "a", 3: 4}]}}}, False)  # likewise
@example({"prompt": {"random_seed": 10**40}}, False)  # regression: no upper bound on the seed
@example({"prompt": {"categories_path": "~nosuchuser_xyz/x"}}, True)  # regression: RuntimeError
@example({"image": {"size": "100000x100000"}}, True)  # regression: no bound on image sides
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_any_config_document_loads_or_raises_config_error_naming_the_key(
    root: Path, doc: dict[Any, Any], as_json: bool
) -> None:
    result = _load_or_config_error(root, _serialise(doc, as_json))
    if isinstance(result, ConfigError):
        # The document is a mapping of valid YAML, so every problem is about some key.
        assert result.key, str(result)
        assert _first_segment(result.key) in {str(k) for k in doc}, (result.key, list(doc))


@given(st.lists(overrides, max_size=4))
@example(["prompt.random_seed=" + "1" * 5_000])  # regression: int digit-limit ValueError
@example(["run.runs=0x" + "f" * 5_000])  # regression: ValueError from repr() in the message
@example(["run.runs=2001-13-01"])  # regression: ValueError from the YAML date constructor
@example(["run.runs=" + "[" * 2_000])  # regression: RecursionError in the YAML composer
@example(["a." * 3_000 + "a=1"])  # regression: RecursionError building the nested override
@example(["0=&0 [*0]"])  # a value containing itself (crashed a first version of the fix)
def test_any_set_overrides_load_or_raise_config_error(root: Path, items: list[str]) -> None:
    result = _load_or_config_error(root, "{}\n", items)
    if isinstance(result, ConfigError) and result.key:
        assert str(result).startswith(f"{result.key}: ")


_valid_yaml_bytes = documents().map(lambda doc: yaml.safe_dump(doc).encode("utf-8"))


_ALIAS_CHAIN = (
    "image:\n  a0: &a0 [1]\n"
    + "".join(f"  a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 3_000))
    + "  model: *a2999\n"
).encode()
_ALIAS_LAUGHS = (
    "image:\n  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    + "".join(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 13))
    + "  model: *a12\n"
).encode()


@st.composite
def spliced(draw: st.DrawFn) -> bytes:
    """A valid YAML document with some bytes replaced: near-misses of real config files."""
    data = bytearray(draw(_valid_yaml_bytes))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=4))
    return bytes(data)


@given(st.one_of(st.binary(max_size=500), st.text().map(str.encode), spliced()))
@example(b"\xff\xfe\x00a")  # regression: UnicodeDecodeError escaped for a non-UTF-8 file
@example(b"run: {runs: " + b"[" * 2_000 + b"}")  # regression: RecursionError
@example(b"\x00")
@example(_ALIAS_CHAIN)  # regression: RecursionError from repr() of alias-built nesting
@example(_ALIAS_LAUGHS)  # regression: hang, repr() of 9**12 aliased leaves in the message
def test_any_bytes_as_config_file_load_or_raise_config_error(root: Path, data: bytes) -> None:
    _load_or_config_error(root, data)


# -- absurd values: explicit -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("backend.max_concurrency", "1000000000000", "1..256"),
        ("backend.max_attempts", "1000000000", "1..20"),
        ("backend.timeout_s", "1.0e+308", "<= 3600"),
        ("backend.timeout_s", ".inf", "<= 3600"),
        ("backend.backoff_max_s", "1.0e+308", "3600"),
        ("backend.max_retry_wait_s", "1.0e+308", "3600"),
        ("run.runs", "1000000000", "1..1000"),
        ("prompt.scoring.num_ideas", "1000000000", "2..52"),
        ("prompt.scoring.max_reasks", "1000000000", "0..5"),
        ("prompt.scoring.min_ok_judges", "1000000000", "1..16"),
        ("prompt.scoring.novelty.window", "1000000000000", "0..10000"),
        ("prompt.random_seed", str(10**40), f"0..{MAX_RUN_SEED}"),
        ("prompt.random_seed", str(MAX_RUN_SEED + 1), f"0..{MAX_RUN_SEED}"),
        ("prompt.random_seed", "0x" + "f" * 5_000, f"0..{MAX_RUN_SEED}"),
        ("prompt.text_temperature", "1.0e+308", "[0, 2]"),
        ("image.size", "100000x100000", f"16..{IMAGE_SIDE_MAX} pixels per side"),
        ("image.size", "4097x1024", f"16..{IMAGE_SIDE_MAX} pixels per side"),
        ("image.size", "15x1024", f"16..{IMAGE_SIDE_MAX} pixels per side"),
        ("image.size", "1" * 5_000 + "x1", f"16..{IMAGE_SIDE_MAX} pixels per side"),
        ("backend.text_model", "m" * 10_000, f"at most {MAX_NAME_CHARS} characters"),
        ("image.model", "m" * (MAX_NAME_CHARS + 1), f"at most {MAX_NAME_CHARS} characters"),
        ("prompt.scoring.judge_model", "m" * 10_000, f"at most {MAX_NAME_CHARS} characters"),
        ("backend.api_key_env", "K" * 10_000, f"at most {MAX_NAME_CHARS} characters"),
        ("backend.base_url", "http://" + "h" * 10_000, "at most 2048 characters"),
        ("prompt.profile_path", "p" * 10_000, f"at most {MAX_PATH_CHARS} characters"),
    ],
)
def test_an_absurd_value_is_a_config_error_naming_key_and_range(
    tmp_path: Path, key: str, value: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "{}\n", [f"{key}={value}"])
    assert info.value.key == key
    assert allowed in info.value.message
    assert len(str(info.value)) < 500


def test_an_absurd_judge_model_in_the_ensemble_names_the_item(tmp_path: Path) -> None:
    doc = {"prompt": {"scoring": {"judges": [{"id": "a"}, {"id": "b", "model": "m" * 10_000}]}}}
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, json.dumps(doc))
    assert info.value.key == "prompt.scoring.judges[1].model"
    assert f"at most {MAX_NAME_CHARS} characters" in info.value.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("prompt.random_seed", str(MAX_RUN_SEED)),
        ("prompt.random_seed", "0"),
        ("image.size", f"{IMAGE_SIDE_MAX}x{IMAGE_SIDE_MAX}"),
        ("image.size", "16x16"),
        ("image.size", "auto"),
        ("backend.text_model", "m" * MAX_NAME_CHARS),
    ],
)
def test_values_at_the_bounds_are_accepted(tmp_path: Path, key: str, value: str) -> None:
    config = _load(tmp_path, "{}\n", [f"{key}={value}"])
    section, _, name = key.rpartition(".")
    node: Any = config
    for part in section.split("."):
        node = getattr(node, part)
    assert str(getattr(node, name)) == value


def test_cli_exits_2_on_an_absurd_value_before_any_model_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)
    code = main(["--config", str(cfg), "--set", "run.runs=1000000000"], env={}, root=REPO)
    assert code == 2
    err = capsys.readouterr().err
    assert "run.runs" in err
    assert "1..1000" in err
    assert not (tmp_path / "out").exists()
