"""Interruption: Ctrl-C (SIGINT) or SIGTERM during concurrent model calls cancels them at once,
writes the transcript with ``error.type == "interrupted"`` and the phase, leaves no image and
no CSV row, and exits 130 / 143. The image call (over HTTP, or the offline drawing) is cut
off the same way and recorded as cut off. A cancellation that arrives while the records are
being written waits for them instead of splitting them; the CLI then exits 0, the run being
complete. Ctrl-C during start-up exits 130 without a traceback.

The CLI cases run ``main.py`` (or another entry point) as a child process and synchronise on
what it prints or on the requests the local server holds, never on sleeps."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import anyio
import pytest

from image_project.artifacts.manifest import manifest_lock
from image_project.backends.base import TextReply, TextRequest
from image_project.backends.offline.text import OfflineTextBackend
from image_project.cli import command as cli
from image_project.run import batch
from image_project.run.driver import run_generation
from image_project.run.state import RunResult
from image_project.testing import FunctionTextBackend
from tests.faults.common import (
    REPO,
    child_env,
    images,
    make_cfg,
    read_rows,
    spawn_main,
    transcripts,
    write_config,
)
from tests.support.openai_server import OpenAIServer, Reply
from tests.test_app import backends

IDEAS = 6
SCORING = {"scoring": {"enabled": True, "num_ideas": IDEAS}}


@pytest.mark.parametrize(
    ("signum", "exit_code"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
    ids=["SIGINT", "SIGTERM"],
)
def test_signal_during_concurrent_calls_cancels_them_and_records_the_interruption(
    tmp_path: Path, allow_loopback: None, signum: signal.Signals, exit_code: int
) -> None:
    release = threading.Event()  # never set: the idea calls would hang without cancellation
    with OpenAIServer(offline=True) as server:
        server.rule(lambda r: r.schema_name == "idea_card", *[Reply(wait_for=release)] * IDEAS)
        config = write_config(tmp_path, base_url=server.base_url, prompt=SCORING)
        proc = spawn_main(tmp_path, "--config", str(config), "--seed", "11")
        try:
            assert server.wait_for_in_flight(IDEAS, timeout=60), "the idea calls never arrived"
            arrived = len(server.requests)
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert len(server.requests) == arrived, "no call may start after the interrupt"

    assert proc.returncode == exit_code, err
    assert f"interrupted ({signum.name})" in err
    (t,) = transcripts(tmp_path)
    error = t["error"]
    assert error["type"] == "interrupted"
    assert error["phase"] == "pipeline"
    cut_off = [p for p in error["cancelled_paths"] if "/ideas/" in p]
    assert len(cut_off) == IDEAS, error
    assert t["blackbox_scoring"]["enabled"] is True
    assert t["image_path"] is None and t["final_image_prompt"] is None
    assert images(tmp_path) == []
    assert read_rows(tmp_path / "out" / "generations.csv") == []
    assert read_rows(tmp_path / "out" / "images" / "titles_manifest.csv") == []
    assert not list(tmp_path.rglob("*.tmp")), "no temporary file may be left behind"


def blocking_ideas(all_arrived: anyio.Event) -> FunctionTextBackend:
    """The offline backend's answers, except that idea-card calls never return (they wait
    until cancelled); ``all_arrived`` is set once all of them are in flight."""
    offline = OfflineTextBackend()
    arrived = 0

    async def answer(request: TextRequest) -> TextReply:
        nonlocal arrived
        if request.json_schema is not None and request.json_schema.name == "idea_card":
            arrived += 1
            if arrived == IDEAS:
                all_arrived.set()
            await anyio.sleep_forever()
        return await offline.complete(request)

    return FunctionTextBackend(answer)


@pytest.mark.anyio
async def test_cancelled_run_lists_the_steps_it_cut_off(tmp_path: Path) -> None:
    all_arrived = anyio.Event()
    cfg = make_cfg(tmp_path, "prompt.scoring.enabled=true", f"prompt.scoring.num_ideas={IDEAS}")
    with pytest.raises(anyio.get_cancelled_exc_class()):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_generation, cfg, backends(blocking_ideas(all_arrived)))
            await all_arrived.wait()
            raise anyio.get_cancelled_exc_class()()
    (t,) = transcripts(tmp_path)
    assert t["error"]["type"] == "interrupted" and t["error"]["phase"] == "pipeline"
    ideas = sorted(p for p in t["error"]["cancelled_paths"] if "/ideas/" in p)
    assert len(ideas) == IDEAS
    recorded = {s["path"] for s in t["steps"]}
    assert not recorded & set(ideas), "a cut-off step is not recorded as finished"
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []


@pytest.mark.anyio
async def test_cancel_during_records_finishes_the_records(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path)
    entered_records = anyio.Event()

    def emit(line: str) -> None:
        if line.startswith("→ records"):
            entered_records.set()

    results: list[RunResult] = []
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            results.append(await run_generation(cfg, backends(OfflineTextBackend()), emit=emit))

    # Hold the manifest lock so that the records phase is certainly still waiting for it
    # when the cancellation arrives.
    lock = manifest_lock(cfg.effective_titles_manifest_path).acquire()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await entered_records.wait()
            scope.cancel()
            await anyio.lowlevel.checkpoint()
            lock.release()
    finally:
        lock.release()

    (result,) = results
    record = result.record
    assert record.title_generation is not None and record.title_generation.seq == 1
    assert [str(p) for p in images(tmp_path)] == [record.image_path]
    (t,) = transcripts(tmp_path)
    assert t["error"] is None
    assert [r["generation_id"] for r in read_rows(tmp_path / "out" / "generations.csv")] == [
        record.generation_id
    ]
    manifest = read_rows(cfg.effective_titles_manifest_path)
    assert [(r["seq"], r["generation_id"]) for r in manifest] == [("1", record.generation_id)]


# --------------------------------------------------------------------------- the CLI, by phase


class Lines:
    """A child's output stream read line by line in a thread, so that a test can wait for a
    line (with a timeout, never a sleep) while the child runs, and read it all at the end."""

    def __init__(self, stream: IO[str] | None) -> None:
        assert stream is not None
        self._stream = stream
        self._lines: list[str] = []
        self._ended = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def wait_for(self, wanted: Callable[[str], bool], timeout: float = 60) -> str:
        """The first line for which ``wanted`` is true, waiting for it to be printed."""

        def found() -> str | None:
            return next((line for line in self._lines if wanted(line)), None)

        with self._cond:
            self._cond.wait_for(lambda: self._ended or found() is not None, timeout=timeout)
            line = found()
            assert line is not None, "the line never came; the child printed:\n" + "".join(
                self._lines
            )
            return line

    def text(self) -> str:
        """Everything the child printed; call it once the child has exited."""
        self._thread.join(timeout=30)
        self._stream.close()
        with self._cond:
            return "".join(self._lines)


def finish(proc: subprocess.Popen[str], err: Lines) -> tuple[int, str, str]:
    """Wait for the child; its exit code, stdout and stderr."""
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read()
    return code, out, err.text()


def cut_off_image_step(t: dict[str, Any]) -> dict[str, Any]:
    """The transcript of a run interrupted during the image call, after its title call (which
    runs alongside) had finished: the image step, after checking that only the title's step
    follows it and that the image alone is listed as cut off."""
    error = t["error"]
    assert (error["type"], error["phase"]) == ("interrupted", "image"), error
    assert error["cancelled_paths"] == ["image"], error
    steps: list[dict[str, Any]] = t["steps"]
    (image,) = [s for s in steps if s["type"] == "image"]
    after = steps[steps.index(image) + 1 :]
    assert after and all(s["path"].startswith("title") for s in after), after
    assert image["error"]["type"] == "cancelled", image
    assert image["received_bytes"] is None and image["format"] is None, image
    assert t["usage"]["image_calls"] == 0
    assert t["image_path"] is None and t["title_generation"] is None
    return image


ENTRY_POINTS = {
    "main.py": [sys.executable, str(REPO / "main.py")],
    "python -m image_project": [sys.executable, "-m", "image_project"],
    "image-project": [str(Path(sys.executable).parent / "image-project")],
}
# With PYTHONPROFILEIMPORTTIME=1 Python prints a line to stderr as each import completes.
_IMPORTED = re.compile(r"^import time:.*\|\s+image_project\.([\w.]+)")


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path: Path, entry: str) -> None:
    argv = ENTRY_POINTS[entry]
    if not Path(argv[0]).exists():
        pytest.skip(f"console script not installed at {argv[0]} (run `pip install -e .`)")
    config = write_config(tmp_path)
    proc = subprocess.Popen(
        [*argv, "--config", str(config), "--seed", "11"],
        cwd=tmp_path,
        env={**child_env(), "PYTHONPROFILEIMPORTTIME": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = Lines(proc.stderr)
    # The first module the command line imports (image_project.cli.launch is the entry point's
    # own, in the cli package): the import of the command line, most of a second, is under way.
    err.wait_for(
        lambda line: (m := _IMPORTED.match(line)) is not None and m[1] not in ("cli", "cli.launch")
    )
    proc.send_signal(signal.SIGINT)
    code, out, text = finish(proc, err)
    messages = [line for line in text.splitlines() if not line.startswith("import time:")]
    # 130, or (in a few percent of trials, on main before this test's change too) killed by
    # the SIGINT itself after printing its line: a shell shows 130 for both, and nothing ran.
    assert code in (130, -signal.SIGINT), text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert [m for m in messages if m.strip()] == ["interrupted (SIGINT)"], text
    assert out == ""
    assert not (tmp_path / "out").exists(), "start-up was interrupted: nothing ran"


def test_ctrl_c_while_the_image_call_is_in_flight_records_it_as_cut_off(
    tmp_path: Path, allow_loopback: None
) -> None:
    release = threading.Event()  # never set: the image call would hang without cancellation
    with OpenAIServer(offline=True) as server:
        server.rule(lambda r: r.is_image, Reply(wait_for=release))
        config = write_config(tmp_path, base_url=server.base_url)
        proc = spawn_main(tmp_path, "--config", str(config), "--seed", "11")
        err = Lines(proc.stderr)
        try:
            # The title call goes with the image call; once it is done the one held request
            # is the image's.
            err.wait_for(lambda line: "✓ title" in line)
            assert server.wait_for_in_flight(1, timeout=60), "the image call never arrived"
            proc.send_signal(signal.SIGINT)
        finally:
            code, _, text = finish(proc, err)
        requests = server.requests
    assert code == 130, text
    assert "interrupted (SIGINT)" in text
    assert sum(r.is_image for r in requests) == 1
    (t,) = transcripts(tmp_path)
    image = cut_off_image_step(t)
    assert image["attempts"] is None and image["prompt"] == t["final_image_prompt"]
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []


def test_ctrl_c_during_the_offline_drawing_stops_it_in_phase_image(tmp_path: Path) -> None:
    # 4096x4096 takes the offline renderer seconds to draw; the interrupt arrives as it
    # starts. Before, the drawing could not be cancelled: it ran to its end and the run was
    # then cut off in phase "title".
    config = write_config(tmp_path, image={"size": "4096x4096"})
    proc = spawn_main(tmp_path, "--config", str(config), "--seed", "11")
    err = Lines(proc.stderr)
    try:
        err.wait_for(lambda line: line.startswith("→ image (offline-image-1, 4096x4096)"))
        err.wait_for(lambda line: "✓ title" in line)  # the title goes alongside the drawing
        proc.send_signal(signal.SIGINT)
    finally:
        code, _, text = finish(proc, err)
    assert code == 130, text
    assert "✓ image" not in text and "→ records" not in text
    (t,) = transcripts(tmp_path)
    image = cut_off_image_step(t)
    assert image["model"] == "offline-image-1" and image["size"] == "4096x4096"
    assert images(tmp_path) == []


def sigint_while_run_1_writes_its_records(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """Start ``main.py --seed 11 *args`` and press Ctrl-C while its first run writes its
    records; return ``(exit code, stdout, stderr)``. The manifest lock is held by this process
    until the signal is handled, so the records phase certainly waits for it then."""
    config = write_config(tmp_path)
    manifest = tmp_path / "out" / "images" / "titles_manifest.csv"
    manifest.parent.mkdir(parents=True)
    lock = manifest_lock(manifest).acquire()
    try:
        proc = spawn_main(tmp_path, "--config", str(config), "--seed", "11", *args)
        err = Lines(proc.stderr)
        err.wait_for(lambda line: line.startswith("→ records"))
        proc.send_signal(signal.SIGINT)
        err.wait_for(lambda line: line.startswith("SIGINT: cancelling"))
    finally:
        lock.release()
    return finish(proc, err)


def test_ctrl_c_while_the_records_are_written_finishes_them_and_exits_0(tmp_path: Path) -> None:
    code, out, text = sigint_while_run_1_writes_its_records(tmp_path)
    manifest = tmp_path / "out" / "images" / "titles_manifest.csv"
    assert code == 0, text
    assert "SIGINT came too late to stop anything: the run was already complete" in text
    assert "interrupted" not in text
    (t,) = transcripts(tmp_path)
    assert t["error"] is None
    assert f"Image       {t['image_path']}" in out  # the summary
    assert [str(p) for p in images(tmp_path)] == [t["image_path"]]
    assert [r["generation_id"] for r in read_rows(tmp_path / "out" / "generations.csv")] == [
        t["generation_id"]
    ]
    assert [r["seq"] for r in read_rows(manifest)] == ["1"]


def test_ctrl_c_while_run_1_writes_its_records_starts_no_run_2(tmp_path: Path) -> None:
    # Pressed while run 1 writes its records, Ctrl-C must not let run 2 start (it would make
    # 12 calls, then be recorded as interrupted): run 1 finishes its records and run 2 never
    # starts.
    code, out, text = sigint_while_run_1_writes_its_records(tmp_path, "--runs", "3")
    manifest = tmp_path / "out" / "images" / "titles_manifest.csv"
    assert code == 130, text
    assert "== run 2 of 3" not in text
    assert text.strip().splitlines()[-1] == (
        "interrupted (SIGINT): 1 completed, 0 interrupted, 2 never started"
    )
    (t,) = transcripts(tmp_path)
    assert t["error"] is None and t["seed"] == 11
    assert f"Image       {t['image_path']}" in out
    assert [r["seq"] for r in read_rows(manifest)] == ["1"]


def test_a_keyboard_interrupt_inside_the_runs_exits_130_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A second Ctrl-C raises KeyboardInterrupt wherever the main thread is (the first one
    # restored the default handler), often inside the run, e.g. while its interrupted
    # transcript is being written. It used to leave the task group wrapped in a
    # BaseExceptionGroup: a 60-line traceback and exit 1.
    # Raised inside a run's task of the batch (image_project.run.batch).
    async def interrupted(*args: object, **kwargs: object) -> RunResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(batch, "run_generation", interrupted)
    code = cli.main(["--config", str(write_config(tmp_path))], env={})
    err = capsys.readouterr().err
    assert code == 130, err
    assert err.strip().splitlines()[-1] == "interrupted"
