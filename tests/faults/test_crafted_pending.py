"""A pending transcript is untrusted input: one crafted to name files outside the folders its
run writes (an absolute path elsewhere, a ``..``, a symlink out, a file named like the run's
image elsewhere) is refused by ``runs import``, named by ``runs list`` and by the next run,
and nothing is touched: no file or folder created, no CSV row, no ``.lock``, nothing
removed, the pending transcript itself left as it is (``image_project.artifacts.pending``,
:class:`~image_project.artifacts.pending.RepairScope`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from image_project.artifacts.pending import PENDING_SUFFIX
from image_project.cli import command as cli
from image_project.store import open_store
from tests.faults.common import REPO, write_config
from tests.support.records import run

GID = "20261202_101500_deadbeef"
NOTHING = "nothing was touched (a pending transcript may only name its own run's files in the folders the configuration writes)"


def layout(tmp: Path) -> tuple[Path, Path, Path]:
    """The project (its config, its output folders, a store that exists) and, beside it, a
    folder no configuration names, holding a file named like the run's image and a
    manifest; the config file, the log folder, the outside folder."""
    out = tmp / "project" / "out"
    (out / "logs").mkdir(parents=True)
    (out / "images").mkdir()
    config = write_config(tmp / "project")
    with open_store(f"sqlite:///{out / 'logs' / 'runs.sqlite'}"):
        pass
    outside = tmp / "outside"
    outside.mkdir()
    (outside / f"{GID}_image.jpg").write_bytes(b"\xff\xd8 somebody else's picture")
    (outside / "titles_manifest.csv").write_text("seq,title,generation_id\n", encoding="utf-8")
    return config, out / "logs", outside


def pending_data(out: Path) -> dict[str, Any]:
    """A pending transcript as its run would write it (the run killed before its manifest
    row): every path the configured one."""
    image = str(out / "images" / f"{GID}_image.jpg")
    record = run(1, image_path=image, title="Quiet Harbour").model_copy(
        update={"generation_id": GID}
    )
    return {
        "pending_records": {
            "generation_id": GID,
            "transcript": str(out / "logs" / f"{GID}_transcript.json"),
            "image": image,
            "upscaled": None,
            "manifest": str(out / "images" / "titles_manifest.csv"),
            "seq": 1,
            "manifest_row": {"seq": "1", "title": "Quiet Harbour", "generation_id": GID},
            "generations": str(out / "generations.csv"),
            "generations_row": {"generation_id": GID, "image_path": image},
        },
        "record": record.model_dump(mode="json"),
    }


def absolute(out: Path, outside: Path, data: dict[str, Any]) -> str:
    where = data["pending_records"]
    where["transcript"] = str(outside / "made" / f"{GID}_transcript.json")
    where["manifest"] = str(outside / "titles_manifest.csv")
    where["generations"] = str(outside / "generations.csv")
    return (
        f"its transcript {where['transcript']!r} is not "
        f"{out / 'logs' / f'{GID}_transcript.json'} (image.log_path)"
    )


def dotdot(out: Path, outside: Path, data: dict[str, Any]) -> str:
    where = data["pending_records"]
    where["image"] = str(out / "images" / ".." / ".." / ".." / "outside" / f"{GID}_image.jpg")
    return (
        f"not a pending transcript (pending_records.image: Value error, {where['image']!r} "
        "has a '..' in it)"
    )


def symlinked_folder(out: Path, outside: Path, data: dict[str, Any]) -> str:
    (out / "images" / "elsewhere").symlink_to(outside, target_is_directory=True)
    where = data["pending_records"]
    where["image"] = str(out / "images" / "elsewhere" / f"{GID}_image.jpg")
    return f"its image {where['image']!r} is not {out / 'images' / f'{GID}_image.jpg'} (image.generation_path)"


def symlinked_image(out: Path, outside: Path, data: dict[str, Any]) -> str:
    image = out / "images" / f"{GID}_image.jpg"
    image.symlink_to(outside / f"{GID}_image.jpg")
    return f"its image {str(image)!r} is a symlink (image.generation_path)"


def named_like_the_image(out: Path, outside: Path, data: dict[str, Any]) -> str:
    where = data["pending_records"]
    where["image"] = str(outside / f"{GID}_image.jpg")
    return f"its image {where['image']!r} is not {out / 'images' / f'{GID}_image.jpg'} (image.generation_path)"


Craft = Callable[[Path, Path, dict[str, Any]], str]
CRAFTED: dict[str, Craft] = {
    "absolute path outside": absolute,
    "dot-dot": dotdot,
    "symlinked folder out": symlinked_folder,
    "symlinked image out": symlinked_image,
    "named like the image, outside": named_like_the_image,
}


def plant(tmp: Path, craft: Craft) -> tuple[Path, Path, str]:
    """The layout with a crafted pending transcript in the log folder; the config, the
    pending file and the line that must refuse it."""
    config, logs, outside = layout(tmp)
    data = pending_data(logs.parent)
    reason = craft(logs.parent, outside, data)
    pending = logs / f"{GID}{PENDING_SUFFIX}"
    pending.write_text(json.dumps(data), encoding="utf-8")
    return config, pending, f"refused {pending}: {reason}; {NOTHING}"


def tree(root: Path) -> dict[str, object]:
    """Every entry under ``root`` (the store's own files aside): a file's bytes, a symlink's
    target, a folder as such."""
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if name.startswith("runs.sqlite"):
                continue
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = "dir"
            else:
                found[key] = path.read_bytes()
    return found


def cli_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv), env={}, root=REPO)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
def test_runs_import_refuses_a_crafted_pending_transcript_and_touches_nothing(
    tmp_path: Path, craft: Craft, capsys: pytest.CaptureFixture[str]
) -> None:
    config, pending, refusal = plant(tmp_path, craft)
    before = tree(tmp_path)
    logs = pending.parent
    url = f"sqlite:///{logs / 'runs.sqlite'}"
    for argv in (
        ("runs", "import", str(logs), "--config", str(config)),
        ("runs", "import", str(pending), "--config", str(config)),
        ("runs", "import", str(logs), "--store", url, "--config", str(config)),
    ):
        code, out, err = cli_run(capsys, *argv)
        assert (code, err.splitlines()) == (1, [f"error: {refusal}"]), err
        assert "imported 0 run(s)" in out and "repaired" not in out
        assert tree(tmp_path) == before
    with open_store(url) as store:
        assert store.records() == []


@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
def test_runs_list_and_the_next_run_name_it_refused_and_suggest_no_repair(
    tmp_path: Path, craft: Craft, capsys: pytest.CaptureFixture[str]
) -> None:
    config, pending, refusal = plant(tmp_path, craft)
    before = tree(tmp_path)
    code, _, said = cli_run(capsys, "runs", "list", "--config", str(config))
    assert code == 0 and refusal in said.splitlines(), said
    assert "repair it" not in said
    assert tree(tmp_path) == before
    outside = {k: v for k, v in before.items() if not k.startswith("project")}
    code, _, said = cli_run(capsys, "--config", str(config), "--prompt-only")
    assert code == 0 and f"! {refusal}" in said.splitlines(), said
    after = tree(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("project")} == outside
    assert after[str(pending.relative_to(tmp_path))] == before[str(pending.relative_to(tmp_path))]


def test_a_pending_transcript_that_is_a_symlink_out_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, logs, outside = layout(tmp_path)
    target = outside / "planted.json"
    target.write_text(json.dumps(pending_data(logs.parent)), encoding="utf-8")
    pending = logs / f"{GID}{PENDING_SUFFIX}"
    pending.symlink_to(target)
    before = tree(tmp_path)
    code, _, err = cli_run(capsys, "runs", "import", str(logs), "--config", str(config))
    assert (code, err.splitlines()) == (
        1,
        [f"error: refused {pending}: not a regular file; {NOTHING}"],
    )
    assert tree(tmp_path) == before
