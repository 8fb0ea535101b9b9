"""Exactly-once records on procrastinate's at-least-once queue, on a real PostgreSQL
(image_project.campaign.fence, .outage): a worker stopped by a signal while another has free
slots, workers killed at three moments, a server restart mid-campaign, and the database cut
off through a TCP proxy the test controls. After each, every run is recorded once: one store
row per run, one transcript, one manifest row, ``seq`` unique, no generation id twice
anywhere, no job left failed, no traceback in any worker's output.

Every wait is for observable state (a line printed, a request reaching a server, a row in the
database, a connection refused by the proxy) with a generous deadline, never a sleep."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from image_project.artifacts.manifest import read_manifest
from image_project.campaign.fence import CLAIMS_TABLE
from image_project.campaign.queue import TASK, campaign_status, conninfo, generation_id_for
from image_project.cli.command import main
from tests.campaign.test_campaign import (
    ENV,
    EXTRA_MODULES,
    REPO,
    SEED,
    HoldingServer,
    Lines,
    _outputs,
    store,
)
from tests.store.conftest import PostgresServer, postgres_bindir, require_postgres, running_postgres
from tests.support.tcp_proxy import TcpProxy

sys.path.insert(0, str(REPO / "bench"))

from simulator import RemoteSimulator

__all__ = ["store"]

STALLED = 2.0  # --stalled-after of these tests' workers
DEADLINE_S = 300.0  # for any state to appear; a test waits on the state, never this long


def _worker(url: str, *extra: str, program: list[str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(program or [sys.executable, "-m", "image_project"]),
            "worker",
            "--store",
            url,
            "--stalled-after",
            f"{STALLED:g}",
            *extra,
        ],
        env=ENV,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _until(what: str, check: Callable[[], bool], deadline_s: float = DEADLINE_S) -> None:
    """Poll ``check`` (the database, files) until it holds; fail naming ``what``."""
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, f"{what}: not within {deadline_s:g} s"
        time.sleep(0.05)


def _query(url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    with psycopg.connect(conninfo(url)) as conn:
        return list(conn.execute(sql.encode(), args).fetchall())


def _statuses(url: str) -> list[str]:
    return [
        str(s)
        for (s,) in _query(
            url,
            "SELECT status::text FROM procrastinate_jobs WHERE task_name = %s ORDER BY id",
            TASK,
        )
    ]


def _submit(tmp: Path, url: str, base_url: str, runs: int) -> str:
    submit = ["campaign", "submit", "--runs", str(runs), "--seed", str(SEED)]
    assert main([*submit, "--set", f"store.url={url}", *_outputs(tmp, base_url)]) == 0
    [counts] = campaign_status(url)
    return counts.campaign


def assert_recorded_once(url: str, campaign: str, runs: int, tmp: Path, *outputs: str) -> None:
    """Store rows = transcripts = manifest rows = the campaign's runs, each once; seq unique;
    every job done; no traceback in any worker's output."""
    expected = [generation_id_for(campaign, i) for i in range(runs)]
    rows = _query(
        url,
        "SELECT r.generation_id, r.status, i.seq FROM runs r "
        "LEFT JOIN images i ON i.generation_id = r.generation_id ORDER BY 1",
    )
    assert [r[0] for r in rows] == expected, "one store row per run"
    assert {r[1] for r in rows} == {"ok"}
    seqs = [r[2] for r in rows]
    assert None not in seqs and len(set(seqs)) == len(seqs), f"seq unique: {seqs}"
    transcripts = sorted(p.name for p in (tmp / "logs").glob("*_transcript.json"))
    assert transcripts == [f"{gid}_transcript.json" for gid in expected]
    for gid in expected:
        record = json.loads((tmp / "logs" / f"{gid}_transcript.json").read_text("utf-8"))
        assert record["generation_id"] == gid and record.get("error") is None
    listed = [r["generation_id"] for r in read_manifest(tmp / "images" / "titles_manifest.csv")]
    assert sorted(listed) == expected, "one manifest row per run"
    manifest_seqs = {
        r["generation_id"]: int(r["seq"])
        for r in read_manifest(tmp / "images" / "titles_manifest.csv")
    }
    assert manifest_seqs == {r[0]: r[2] for r in rows}, "the manifest's seq is the store's"
    assert set(_statuses(url)) == {"succeeded"}, "every job done, none failed"
    [counts] = campaign_status(
        url, campaign, (tmp / "logs", tmp / "images" / "titles_manifest.csv")
    )
    assert counts.problems == (), counts.problems
    assert counts.records == (runs, runs, runs)
    for out in outputs:
        assert "Traceback" not in out and "Task exception" not in out, out


def _starts(*outputs: str) -> int:
    return sum(out.count("started (seed") for out in outputs)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_worker_keeps_its_run_while_another_has_free_slots(
    tmp_path: Path, store: str, signum: signal.Signals
) -> None:
    """Worker A holds one run (its model call held); B, with free slots, makes the others and
    idles. A is signalled: its heartbeat goes on past a stall period while its run is held,
    so B never takes that run; released, A finishes it. One start per run."""
    sim = RemoteSimulator(chat_median_s=0.01, image_median_s=0.01)
    with sim.serve() as base_url, HoldingServer(base_url) as held:
        campaign = _submit(tmp_path, store, base_url, runs=3)
        a = _worker(store, "--parallel", "1", "--set", f"backend.base_url={held.base_url}")
        b: subprocess.Popen[str] | None = None
        try:
            a_out = Lines(a)
            assert held.called.wait(timeout=DEADLINE_S), "worker A never sent a model call"
            [(a_id,)] = _query(
                store, "SELECT worker_id FROM procrastinate_jobs WHERE status = 'doing'"
            )
            b = _worker(store, "--parallel", "3", "--until-done")
            b_out = Lines(b)
            _until("B made the two other runs", lambda: _statuses(store).count("succeeded") == 2)
            a.send_signal(signum)
            a_out.wait_for(f"{signum.name}: taking no new run")
            [(signalled,)] = _query(store, "SELECT now()")

            def a_alive_past_a_stall() -> bool:
                [(since,)] = _query(
                    store,
                    "SELECT extract(epoch FROM last_heartbeat - %s) FROM procrastinate_workers "
                    "WHERE id = %s",
                    signalled,
                    a_id,
                )
                return since is not None and float(str(since)) > 2 * STALLED

            _until("A's heartbeat went on after the signal", a_alive_past_a_stall)
            assert _statuses(store).count("doing") == 1, "A's run is still A's"
            held.release.set()
            assert a.wait(timeout=DEADLINE_S) == 0, a_out.text()
            assert b.wait(timeout=DEADLINE_S) == 0, b_out.text()
        finally:
            held.release.set()
            for worker in (a, b):
                if worker is not None:
                    worker.kill()
                    worker.wait(timeout=60)
    texts = a_out.text(), b_out.text()
    assert "worker: 1 run(s) made" in texts[0], texts[0]
    assert "worker: 2 run(s) made" in texts[1], texts[1]
    assert _starts(*texts) == 3, texts
    assert not any("queued again" in t or "wrote nothing" in t for t in texts), texts
    assert_recorded_once(store, campaign, 3, tmp_path, *texts)
    [counts] = campaign_status(store)
    assert (counts.again, counts.infra) == (0, 0)


KILLER = """
import os, signal, sys
from image_project.artifacts import pending
point = sys.argv.pop(1)
def kill(reached):
    if reached == point:
        os.kill(os.getpid(), signal.SIGKILL)
pending.on_point = kill
from image_project.cli.launch import launch
sys.exit(launch(prog="image-project"))
"""


@pytest.mark.parametrize(
    "point",
    ["model_call", "image", "stored"],
    ids=["mid-model-call", "records-after-image", "after-store-row"],
)
def test_a_worker_killed_at_three_moments_leaves_every_run_recorded_once(
    tmp_path: Path, store: str, point: str
) -> None:
    """A worker is killed (SIGKILL) while its run waits for a model answer, in its records
    phase once its image is written (its seq reserved), or just after its store row; a second
    worker takes the run again after the stall: the run is recorded once (the last case: found
    recorded, not made again)."""
    sim = RemoteSimulator(chat_median_s=0.01, image_median_s=0.01)
    with sim.serve() as base_url, HoldingServer(None) as dead_end:
        campaign = _submit(tmp_path, store, base_url, runs=3)
        if point == "model_call":
            victim = _worker(
                store, "--parallel", "1", "--set", f"backend.base_url={dead_end.base_url}"
            )
            try:
                assert dead_end.called.wait(timeout=DEADLINE_S)
                victim.send_signal(signal.SIGKILL)
            finally:
                victim.kill()
        else:
            victim = _worker(
                store, "--parallel", "1", program=[sys.executable, "-c", KILLER, point]
            )
        victim_out = victim.communicate(timeout=DEADLINE_S)[0]
        assert victim.returncode == -signal.SIGKILL, victim_out
        [taken] = [i for i, s in enumerate(_statuses(store)) if s == "doing"]
        survivor = _worker(store, "--parallel", "2", "--until-done")
        out = survivor.communicate(timeout=DEADLINE_S)[0]
        assert survivor.returncode == 0, out
    assert "queued again" in out
    gid = generation_id_for(campaign, taken)
    if point == "stored":
        assert f"already recorded as {gid}" in out
        assert _starts(out) == 2
    else:
        assert _starts(out) == 3
    # The killed attempt's pending transcript (records phase) is not a transcript.
    for leftover in (tmp_path / "logs").glob("*.pending.json"):
        leftover.unlink()
    assert_recorded_once(store, campaign, 3, tmp_path, out)
    [(attempts,)] = _query(
        store, f"SELECT attempts FROM {CLAIMS_TABLE} WHERE generation_id = %s", gid
    )
    assert attempts == 2
    [counts] = campaign_status(store)
    assert (counts.again, counts.infra) == (1, 0)


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own, to restart (the session's serves other tests)."""
    missing = [m for m in EXTRA_MODULES if __import__("importlib").util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the campaign extra is not installed ({', '.join(missing)} missing)")
    with running_postgres(require_postgres(postgres_bindir())) as server:
        server.create_database("restarted")
        yield server


def _two_workers(url: str, *extra: str) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
    return (
        _worker(url, "--parallel", "2", "--until-done", *extra),
        _worker(url, "--parallel", "2", "--until-done", *extra),
    )


@pytest.mark.postgres
def test_a_server_restart_mid_campaign_loses_no_run_and_makes_none_twice(
    tmp_path: Path, own_server: PostgresServer
) -> None:
    url = own_server.url("restarted")
    runs = 12
    sim = RemoteSimulator(chat_median_s=0.05, image_median_s=0.1)
    with sim.serve() as base_url:
        campaign = _submit(tmp_path, url, base_url, runs=runs)
        workers = _two_workers(url)
        try:
            outs = [Lines(w) for w in workers]
            _until("some runs done", lambda: _statuses(url).count("succeeded") >= 3)
            assert "todo" in _statuses(url), "the restart falls mid-campaign"
            own_server.restart()
            codes = [w.wait(timeout=DEADLINE_S) for w in workers]
        finally:
            for w in workers:
                w.kill()
                w.wait(timeout=60)
    texts = [o.text() for o in outs]
    assert codes == [0, 0], texts
    assert_recorded_once(url, campaign, runs, tmp_path, *texts)
    assert _starts(*texts) == runs + sum(t.count("queued again") for t in texts), texts


def test_the_database_cut_off_for_seconds_loses_no_run_and_makes_none_twice(
    tmp_path: Path, store: str, postgres_server: PostgresServer
) -> None:
    """The workers reach the database through a proxy that the test cuts (every connection
    closed, every new one refused) until each worker has been refused many times, then
    restores; the workers wait it out and make every run once."""
    runs = 8
    with TcpProxy(postgres_server.port) as proxy:
        via = store.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        sim = RemoteSimulator(chat_median_s=0.05, image_median_s=0.1)
        with sim.serve() as base_url:
            campaign = _submit(tmp_path, store, base_url, runs=runs)
            workers = _two_workers(via)
            try:
                outs = [Lines(w) for w in workers]
                _until("some runs done", lambda: _statuses(store).count("succeeded") >= 2)
                proxy.cut()
                assert proxy.wait_refused(40, timeout=DEADLINE_S), "nobody tried to reconnect"
                proxy.restore()
                codes = [w.wait(timeout=DEADLINE_S) for w in workers]
            finally:
                for w in workers:
                    w.kill()
                    w.wait(timeout=60)
    texts = [o.text() for o in outs]
    assert codes == [0, 0], texts
    assert_recorded_once(store, campaign, runs, tmp_path, *texts)


def test_a_worker_that_cannot_reach_the_database_past_its_bound_exits_3_in_one_line(
    tmp_path: Path, store: str, postgres_server: PostgresServer
) -> None:
    """Cut off for longer than ``--database-lost-after``, a worker exits 3 with one line and
    writes nothing of its run; once the database is back, another worker makes both runs."""
    sim = RemoteSimulator(chat_median_s=0.01, image_median_s=0.01)
    with (
        TcpProxy(postgres_server.port) as proxy,
        sim.serve() as base_url,
        HoldingServer(base_url) as held,
    ):
        via = store.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        campaign = _submit(tmp_path, store, base_url, runs=2)
        worker = _worker(
            via,
            "--parallel",
            "1",
            "--database-lost-after",
            "1",
            "--set",
            f"backend.base_url={held.base_url}",
        )
        try:
            out = Lines(worker)
            assert held.called.wait(timeout=DEADLINE_S)
            proxy.cut()
            held.release.set()
            code = worker.wait(timeout=DEADLINE_S)
        finally:
            held.release.set()
            worker.kill()
            worker.wait(timeout=60)
        text = out.text()
        assert code == 3, text
        assert "has not answered for 1 s (--database-lost-after): stopping (exit 3)" in text
        assert "Traceback" not in text and "Task exception" not in text, text
        assert not list((tmp_path / "logs").glob("*_transcript*.json")), text
        images = tmp_path / "images"
        assert not (images.is_dir() and [p for p in images.rglob("*") if p.is_file()]), text
        proxy.restore()
        survivor = _worker(store, "--parallel", "2", "--until-done")
        again = survivor.communicate(timeout=DEADLINE_S)[0]
        assert survivor.returncode == 0, again
    assert_recorded_once(store, campaign, 2, tmp_path, text, again)


def test_campaign_status_names_what_does_not_agree(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A generation listed twice in the manifest, a transcript without a store row and a
    manifest row with neither are each named by ``campaign status``."""
    sim = RemoteSimulator(chat_median_s=0.01, image_median_s=0.01)
    with sim.serve() as base_url:
        campaign = _submit(tmp_path, store, base_url, runs=2)
        worker = _worker(store, "--parallel", "2", "--until-done")
        out = worker.communicate(timeout=DEADLINE_S)[0]
        assert worker.returncode == 0, out
    assert_recorded_once(store, campaign, 2, tmp_path, out)
    manifest = tmp_path / "images" / "titles_manifest.csv"
    lines = manifest.read_text("utf-8").splitlines(keepends=True)
    first, second = generation_id_for(campaign, 0), generation_id_for(campaign, 1)
    row = next(line for line in lines if first in line)
    ghost = generation_id_for(campaign, 7)
    manifest.write_text("".join([*lines, row, row.replace(first, ghost)]), "utf-8")
    stray = generation_id_for(campaign, 8)
    (tmp_path / "logs" / f"{stray}_transcript.json").write_text("{}", "utf-8")
    with psycopg.connect(conninfo(store)) as conn:
        conn.execute("DELETE FROM runs WHERE generation_id = %s", (second,))
    args = ["campaign", "status", "--store", store, *_outputs(tmp_path, "http://127.0.0.1:9/v1")]
    assert main(args) == 0
    printed = capsys.readouterr().out
    flagged = [line for line in printed.splitlines() if line.startswith("  ! ")]
    assert flagged == [
        f"  ! generation {first} is listed 2 times in {manifest}",
        f"  ! transcript of {second} in {tmp_path / 'logs'} has no store row",
        f"  ! transcript of {stray} in {tmp_path / 'logs'} has no store row",
        f"  ! manifest row of {ghost} in {manifest} has neither a store row nor a transcript",
    ], printed
    assert "records: 1 in the store, 3 transcripts, 4 manifest rows here" in printed
    assert "0 made again after a stall, 0 failed by infrastructure" in printed
