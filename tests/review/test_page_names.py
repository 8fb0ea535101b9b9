"""One page per run: ``page_name`` maps every generation id to itself and every other string
(a run stored before ids were checked) to a name no id and no other string has, lower case
and file-name safe; a site of runs ``z/y`` and ``z_y`` has a page and an image for each."""

from __future__ import annotations

import random
import re
from pathlib import Path

from PIL import Image

from image_project.review.site import build_site
from image_project.review.views import page_name
from image_project.run.state import new_generation_id
from tests.support.records import run

SAFE = re.compile(r"[a-z0-9_-]{1,130}")
TRICKY = ["z/y", "z_y", "z-y", "Z_y", "z\\y", "", "..", "_7a", "7a", "\x00", "é", "x" * 65]


def test_page_names_are_one_to_one_and_safe() -> None:
    rng = random.Random(43)
    ids = [new_generation_id() for _ in range(50)] + TRICKY
    ids += [
        "".join(rng.choice("zZy_/.-\x00é") for _ in range(rng.randint(0, 80))) for _ in range(2000)
    ]
    ids = list(dict.fromkeys(ids))
    names = [page_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert len({n.lower() for n in names}) == len(ids)  # a case-insensitive filesystem too
    assert [n for n in names if not SAFE.fullmatch(n)] == []
    assert [i for i in ids[:50] if page_name(i) != i] == []


def test_runs_z_slash_y_and_z_y_each_get_their_page_and_image(tmp_path: Path) -> None:
    records = []
    for n, gid in enumerate(["z/y", "z_y"], start=1):
        image = tmp_path / "out" / f"{n}.jpg"
        image.parent.mkdir(exist_ok=True)
        Image.new("RGB", (32, 24), ("teal", "olive")[n - 1]).save(image, format="JPEG")
        record = run(n, scoring=False, image_path=str(image), title=f"Run {n}")
        records.append(record.model_copy(update={"generation_id": gid}))
    root = build_site(records, tmp_path / "site").parent
    pages = sorted(p.name for p in (root / "runs").glob("*.html"))
    assert pages == sorted([f"{page_name('z/y')}.html", "z_y.html"])
    for n, record in enumerate(records, start=1):
        page = (root / "runs" / f"{page_name(record.generation_id)}.html").read_text("utf-8")
        assert record.generation_id in page and f"Run {n}" in page
        copied = root / "images" / f"{page_name(record.generation_id)}.jpg"
        assert copied.read_bytes() == (tmp_path / "out" / f"{n}.jpg").read_bytes()
