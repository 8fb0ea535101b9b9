"""README.md's opening promises: every model call is recorded in the transcript (each request
a backend received is a recorded step's, in a standard and in a scoring run), and no module
of the package draws from the global ``random`` (every random choice comes from a seeded
``random.Random``, the run's through ``derive_seed``)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from image_project.backends.base import TextReply, TextRequest
from image_project.backends.factory import Backends
from image_project.backends.offline.text import OfflineTextBackend
from image_project.record.events import ChatEvent, ImageEvent
from image_project.run.driver import run_generation
from image_project.testing import FakeImageBackend, FunctionTextBackend
from tests.test_app import make_cfg

PACKAGE = Path(__file__).resolve().parents[1] / "image_project"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "extra",
    [(), ("prompt.scoring.enabled=true", "prompt.scoring.judges=[{id: a}, {id: b}]")],
    ids=["standard", "scoring"],
)
async def test_every_model_call_is_recorded_in_the_transcript(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    offline = OfflineTextBackend()

    async def answer(request: TextRequest) -> TextReply:
        return await offline.complete(request)

    text, image = FunctionTextBackend(answer), FakeImageBackend()
    backends = Backends(text=text, image=image, provider="offline", description="fakes")
    record = (await run_generation(make_cfg(tmp_path, *extra), backends)).record
    chats = [s for s in record.steps if isinstance(s, ChatEvent)]
    # A step's answers are its requests (a re-ask is one more); each request carries the
    # step's seed.
    recorded = Counter(s.params.seed for s in chats for _ in range(s.answers))
    assert Counter(r.seed for r in text.requests) == recorded
    assert sum(recorded.values()) == len(text.requests) > 15
    images = [s for s in record.steps if isinstance(s, ImageEvent)]
    assert len(images) == len(image.requests) == 1
    assert record.usage.model_calls == len(chats)


GLOBAL_RANDOM = {
    "random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample",
    "gauss", "normalvariate", "betavariate", "expovariate", "triangular", "getrandbits",
    "seed", "randbytes",
}  # fmt: skip


def global_random_uses(source: str) -> list[str]:
    """``random.<function>(...)`` calls of the module-level generator, ``from random import``
    of one, and ``random.Random()`` without a seed, in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "random":
            found += [f"from random import {a.name}" for a in node.names if a.name in GLOBAL_RANDOM]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "random"
        ):
            if node.func.attr in GLOBAL_RANDOM:
                found.append(f"random.{node.func.attr}() at line {node.lineno}")
            elif node.func.attr == "Random" and not node.args and not node.keywords:
                found.append(f"random.Random() without a seed at line {node.lineno}")
    return found


def test_no_module_draws_from_the_global_random() -> None:
    found = {
        str(path.relative_to(PACKAGE)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if (uses := global_random_uses(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_scan_sees_each_kind_of_global_draw() -> None:
    """Control: the scan reports what it looks for, and leaves seeded generators alone."""
    source = (
        "import random\nfrom random import shuffle\nrandom.choice([1])\nrandom.Random()\n"
        "random.Random(3).random()\nrng.shuffle(x)\n"
    )
    assert global_random_uses(source) == [
        "from random import shuffle",
        "random.choice() at line 3",
        "random.Random() without a seed at line 4",
    ]
