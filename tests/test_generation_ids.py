"""Generation ids (``image_project.record.ids``): the one pattern accepts every id the
product makes and refuses anything that could name another file; a run given another id
refuses it before anything is written, and the store writer never stores one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from image_project.backends.factory import Backends
from image_project.campaign.queue import generation_id_for, new_campaign_id
from image_project.record.ids import (
    GENERATION_ID_PATTERN,
    check_generation_id,
    generation_id_problem,
)
from image_project.run.driver import run_generation
from image_project.run.state import new_generation_id
from image_project.store.writer import StoreWriter
from image_project.testing import FakeImageBackend, FunctionTextBackend
from tests.faults.common import make_cfg
from tests.support.records import run

BAD = ["", ".", "..", "z/y", "../x", "/etc/passwd", "a\x00b", "x" * 65, "Run1", "_x", "a b"]


def test_every_id_the_product_makes_is_a_generation_id() -> None:
    made = [new_generation_id() for _ in range(200)]
    campaign = new_campaign_id()
    made += [generation_id_for(campaign, i) for i in (0, 1, 9, 99_998)]
    assert [i for i in made if generation_id_problem(i) is not None] == []
    assert check_generation_id(made[0]) == made[0]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_anything_else_is_refused_naming_it_and_the_pattern(bad: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_generation_id(bad)
    assert str(caught.value).endswith(f"does not match {GENERATION_ID_PATTERN}")
    assert repr(bad)[:40] in str(caught.value)


def test_a_random_mix_of_allowed_characters_either_matches_or_is_named() -> None:
    rng = random.Random(43)
    for _ in range(500):
        text = "".join(rng.choice("ab9_-/.\x00A") for _ in range(rng.randint(0, 70)))
        plain = 0 < len(text) <= 64 and set(text) <= set("ab9_-") and text[0] not in "_-"
        assert (generation_id_problem(text) is None) == plain, text


@pytest.mark.anyio
@pytest.mark.parametrize("bad", ["../escape", "z/y", ""], ids=repr)
async def test_a_run_given_another_id_refuses_it_before_writing_anything(
    tmp_path: Path, bad: str
) -> None:
    cfg = make_cfg(tmp_path)
    backends = Backends(
        text=FunctionTextBackend(lambda request: pytest.fail("no model call")),
        image=FakeImageBackend(),
        provider="offline",
        description="fake",
    )
    with pytest.raises(ValueError, match="does not match"):
        await run_generation(cfg, backends, generation_id=bad)
    assert not (tmp_path / "out").exists()


def test_the_store_writer_refuses_a_record_with_another_id(tmp_path: Path) -> None:
    writer = StoreWriter(f"sqlite:///{tmp_path / 'runs.sqlite'}")
    try:
        outcome = writer.save(run(1).model_copy(update={"generation_id": "../x"}))
        assert not outcome.written
        assert outcome.error == (
            f"ValueError: generation id '../x' does not match {GENERATION_ID_PATTERN}"
        )
        assert writer.save(run(2)).written
    finally:
        writer.close()
