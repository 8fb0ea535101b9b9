"""Disk and input faults: each is exit 2 with a clear message before any model call.

Every case runs the CLI in-process against a local OpenAI-compatible server through the real
adapter and asserts that no request reached it and that nothing but (empty) directories was
written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from image_project.artifacts.generations import GENERATIONS_FIELDS
from image_project.artifacts.manifest import MANIFEST_FIELDS
from image_project.cli.command import main
from image_project.stages.concepts import EXPECTED_COLUMNS
from tests.faults import common
from tests.faults.common import read_rows
from tests.support.openai_server import OpenAIServer

REPO = Path(__file__).resolve().parents[2]
ENV = {"OPENAI_API_KEY": "test"}
PROBE = ".image_project-write-check-"


def write_config(tmp: Path, base_url: str, **sections: dict[str, Any]) -> Path:
    """The shared config (outputs in ``tmp/out``), one attempt per call: nothing may be
    called at all, and a stray call should fail fast."""
    return common.write_config(
        tmp,
        base_url=base_url,
        **{**sections, "backend": {"max_attempts": 1, **sections.get("backend", {})}},
    )


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if not p.is_dir())


# Each case prepares the fault under tmp and returns (config overrides, text the error must
# contain besides the path, the path the error must name).
Case = Callable[[Path], tuple[dict[str, dict[str, Any]], str, Path]]


def _blocker(tmp: Path) -> Path:
    """A regular file: a directory under it cannot be created, even by root."""
    blocker = tmp / "blocker"
    blocker.write_text("not a directory", encoding="utf-8")
    return blocker


def unwritable_dir(section: str, key: str, leaf: str) -> Case:
    def prepare(tmp: Path) -> tuple[dict[str, dict[str, Any]], str, Path]:
        bad = _blocker(tmp) / "sub"
        value = bad / leaf if leaf else bad
        return {section: {key: str(value)}}, f"{section}.{key} is not a writable directory", bad

    return prepare


def input_file(key: str, content: bytes | None, message: str) -> Case:
    """``prompt.<key>`` pointing at a file with ``content`` (None: missing; b"/": a dir)."""

    def prepare(tmp: Path) -> tuple[dict[str, dict[str, Any]], str, Path]:
        path = tmp / "data" / f"{key}.csv"
        path.parent.mkdir()
        if content == b"/":
            path.mkdir()
        elif content is not None:
            path.write_bytes(content)
        return {"prompt": {key: str(path)}}, message, path

    return prepare


def record_file(which: str, content: bytes | None, message: str) -> Case:
    """An existing generations CSV or titles manifest with ``content`` (b"/": a directory)."""

    def prepare(tmp: Path) -> tuple[dict[str, dict[str, Any]], str, Path]:
        if which == "generations":
            path = tmp / "out" / "generations.csv"
        else:
            path = tmp / "out" / "images" / "titles_manifest.csv"
        path.parent.mkdir(parents=True)
        if content == b"/":
            path.mkdir()
        elif content is not None:
            path.write_bytes(content)
        return {}, message, path

    return prepare


CATEGORIES_HEADER = ",".join(EXPECTED_COLUMNS).encode()
GENERATIONS_HEADER = ",".join(GENERATIONS_FIELDS).encode()
MANIFEST_HEADER = ",".join(MANIFEST_FIELDS).encode()
MANIFEST_ROW = b"1,Ok,g,p,i,,,,,,,\r\n"

CASES: dict[str, Case] = {
    "log_dir_under_a_file": unwritable_dir("image", "log_path", "logs"),
    "image_dir_under_a_file": unwritable_dir("image", "generation_path", "images"),
    "generations_dir_under_a_file": unwritable_dir("prompt", "generations_path", "g.csv"),
    "manifest_dir_under_a_file": unwritable_dir("prompt", "titles_manifest_path", "t.csv"),
    "log_dir_is_a_file": lambda tmp: (
        {"image": {"log_path": str(_blocker(tmp))}},
        "image.log_path is not a writable directory (it exists and is not a directory)",
        tmp / "blocker",
    ),
    "categories_missing": input_file("categories_path", None, "categories file not found"),
    "categories_empty": input_file("categories_path", b"", "categories file is empty"),
    "categories_bom_only": input_file("categories_path", b"\xef\xbb\xbf\n", "is empty"),
    "categories_header_only": input_file(
        "categories_path", CATEGORIES_HEADER + b"\n", "header row but no data rows"
    ),
    "categories_not_utf8": input_file(
        "categories_path",
        CATEGORIES_HEADER + b"\n" + "Café".encode("latin-1") + b",a,b,c,d,e,f,g\n",
        f"not valid UTF-8 (byte 0xe9 at offset {len(CATEGORIES_HEADER) + 4})",
    ),
    "categories_utf16": input_file(
        "categories_path", CATEGORIES_HEADER.decode().encode("utf-16"), "looks like UTF-16"
    ),
    "categories_binary": input_file("categories_path", b"\x00" * 64, "NUL bytes"),
    "categories_wrong_header": input_file(
        "categories_path", b"Subject,Mood,Style\na,b,c\n", "missing column(s) 'Subject Matter'"
    ),
    "categories_is_a_directory": input_file("categories_path", b"/", "is a directory"),
    "profile_missing": input_file("profile_path", None, "profile file not found"),
    "profile_empty": input_file("profile_path", b"  \n", "profile file is empty"),
    "profile_header_only": input_file(
        "profile_path", b"Likes,Dislikes\n", "header row but no items"
    ),
    "profile_not_utf8": input_file(
        "profile_path", b"Likes,Dislikes\n" + "Crème".encode("cp1252") + b",x\n", "UTF-8"
    ),
    "profile_is_a_directory": input_file("profile_path", b"/", "is a directory"),
    "profile_of_10000_rows": input_file(
        "profile_path",
        b"category,item,notes\n"
        + b"".join(
            b"like,Misty coastal morning number %d,soft grey light\n" % n for n in range(10_000)
        ),
        "more than prompt.max_profile_chars (20,000)",
    ),
    "generations_wrong_header": record_file(
        "generations", b"id,prompt\r\n1,x\r\n", "prompt.generations_path: the generations CSV"
    ),
    "generations_not_utf8": record_file(
        "generations",
        GENERATIONS_HEADER + b"\r\n1,[],caf\xe9,,,\r\n",
        "generations CSV is not valid UTF-8 (byte 0xe9",
    ),
    "generations_is_a_directory": record_file("generations", b"/", "is a directory"),
    "manifest_wrong_header": record_file(
        "manifest", b"seq,title\r\n1,Old\r\n", "image.generation_path: the titles manifest"
    ),
    "manifest_not_utf8_late": record_file(
        "manifest",
        MANIFEST_HEADER + b"\r\n" + MANIFEST_ROW * 50 + b"2,\xff\xfe,g,p,i,,,,,,,\r\n",
        "titles manifest is not valid UTF-8 (byte 0xff at offset "
        f"{len(MANIFEST_HEADER) + 2 + 50 * len(MANIFEST_ROW) + 2})",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fault_exits_2_before_any_model_call(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    overrides, message, bad_path = CASES[case](tmp_path)
    before = files_under(tmp_path)
    with OpenAIServer() as server:
        config = write_config(tmp_path, server.base_url, **overrides)
        code = main(["--config", str(config), "--seed", "3"], env=ENV, root=REPO)
        assert server.requests == []
    err = capsys.readouterr().err
    assert code == 2, err
    assert "input file error: " in err
    assert str(bad_path) in err
    assert message in err
    assert "Traceback" not in err
    # Nothing written: no transcript, log, image, CSV row, lock or write-check probe.
    assert files_under(tmp_path) == sorted([*before, config])


def test_header_mismatch_message_shows_both_headers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    manifest = tmp_path / "titles.csv"
    manifest.write_bytes(b"seq,title,generation_id\r\n1,Old,g\r\n")
    with OpenAIServer() as server:
        config = write_config(
            tmp_path, server.base_url, prompt={"titles_manifest_path": str(manifest)}
        )
        code = main(["--config", str(config)], env=ENV, root=REPO)
        assert server.requests == []
    err = capsys.readouterr().err
    assert code == 2
    assert (
        f"{manifest}: prompt.titles_manifest_path: the titles manifest has the header "
        "['seq', 'title', 'generation_id'], expected ['seq', 'title', 'generation_id', "
        "'image_prompt'" in err
    )
    assert manifest.read_bytes() == b"seq,title,generation_id\r\n1,Old,g\r\n"


def test_runs_3_stops_before_the_first_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    blocker = _blocker(tmp_path)
    with OpenAIServer() as server:
        config = write_config(tmp_path, server.base_url, image={"log_path": str(blocker / "logs")})
        code = main(["--config", str(config), "--runs", "3"], env=ENV, root=REPO)
        assert server.requests == []
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("input file error: ") == 1
    assert f"{blocker / 'logs'}: image.log_path is not a writable directory" in err
    assert "== run 1 of 3" not in err
    assert not (tmp_path / "out").exists()


def test_usable_existing_records_pass_the_preflight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not too strict: a BOM, a header-only CSV with blank lines and an empty manifest are
    fine, and the run appends to them."""
    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    generations = out / "generations.csv"
    generations.write_bytes(b"\xef\xbb\xbf" + GENERATIONS_HEADER + b"\r\n\r\n")
    manifest = out / "images" / "titles_manifest.csv"
    manifest.write_bytes(b"")
    config = write_config(tmp_path, "http://127.0.0.1:9/v1")
    code = main(["--config", str(config), "--offline", "--seed", "3", "-q"], env={}, root=REPO)
    assert code == 0, capsys.readouterr().err
    assert len(read_rows(generations)) == len(read_rows(manifest)) == 1
    assert not list(out.rglob(f"{PROBE}*"))


def test_prompt_only_run_does_not_need_the_image_and_record_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = _blocker(tmp_path)
    config = write_config(
        tmp_path,
        "http://127.0.0.1:9/v1",
        image={"generation_path": str(blocker / "images")},
        prompt={"generations_path": str(blocker / "generations.csv")},
    )
    args = ["--config", str(config), "--offline", "--prompt-only", "-q"]
    code = main(args, env={}, root=REPO)
    assert code == 0, capsys.readouterr().err
    assert len(list((tmp_path / "out" / "logs").glob("*_transcript.json"))) == 1
