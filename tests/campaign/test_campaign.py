"""A campaign across machines (image_project.campaign): runs queued in a real PostgreSQL by
procrastinate, made by worker processes, one of them killed with SIGKILL mid-run; one request
budget per key in that database (pyrate-limiter's PostgreSQL bucket). The runs go through the
real OpenAI client to the bench's simulator (its own process) with a requests-per-window
limit; a worker "on another machine" talks to its own local server (``backend.base_url``).
Every wait is for an event (a request reaching a server, a process exiting), never a sleep."""

from __future__ import annotations

import contextlib
import http.server
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from image_project.campaign.limiter import PostgresBudget, budget_name
from image_project.campaign.queue import (
    TASK,
    campaign_status,
    conninfo,
    generation_id_for,
    require_campaign,
)
from image_project.cli.command import main
from image_project.errors import ConfigError
from tests.store.conftest import PostgresServer, in_ci
from tests.support.transcripts import RUN_VOLATILE, without_keys

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from simulator import CallRecord, RemoteSimulator  # noqa: E402

EXTRA_MODULES = ("procrastinate", "pyrate_limiter", "psycopg_pool")
RUNS = 24
SEED = 4242
LIMIT, WINDOW_S = 30, 1.0  # the simulator's rate limit: 30 requests per 1 s window
STALLED_AFTER = "5"  # seconds without a heartbeat before a worker is taken for dead
ENV = {**os.environ, "OPENAI_API_KEY": "sk-campaign-test", "PYTHONPATH": str(REPO)}

# What may differ between the same run made by a batch and by a campaign worker: what differs
# between a batch's runs (RUN_VOLATILE), and a call's attempts (a 429 in the first window,
# before any answer told the workers the limit, retries the same request once more).
VOLATILE = RUN_VOLATILE | {
    "attempts",
    # The pre-flight model check is the process's, made once per worker or batch: how many
    # tries it took is no part of a run's requests or picks.
    "preflight",
}


def _normal(value: Any) -> Any:
    return without_keys(value, VOLATILE)


def _by_seed(logs: Path) -> dict[int, dict[str, Any]]:
    found = [json.loads(p.read_text("utf-8")) for p in logs.glob("*_transcript.json")]
    return {t["seed"]: t for t in found}


def _outputs(tmp: Path, base_url: str) -> list[str]:
    return [
        "--set",
        "backend.provider=openai",
        "--set",
        f"backend.base_url={base_url}",
        "--set",
        "backend.max_concurrency=16",
        "--set",
        f"image.generation_path={tmp / 'images'}",
        "--set",
        f"image.log_path={tmp / 'logs'}",
        "--set",
        f"prompt.generations_path={tmp / 'generations.csv'}",
        "--set",
        "image.size=1024x1024",
    ]


class HoldingServer:
    """A local OpenAI-compatible server that holds every model call (POST) until released:
    ``called`` is set when the first one arrives. Released, it forwards each call to
    ``target`` (a server's base URL) and answers with what that answered; without a target
    it answers 503. Without a target it lists no models (404, so the probe passes); with
    one, a GET is forwarded at once."""

    def __init__(self, target: str | None = None) -> None:
        self.called = threading.Event()
        self.release = threading.Event()
        origin = target.rsplit("/v1", 1)[0] if target is not None else None
        holding = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if origin is None:
                    self.send_error(404)
                else:
                    self._forward(None)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                holding.called.set()
                holding.release.wait(timeout=600)
                if origin is None:
                    with contextlib.suppress(OSError):  # the client is gone (killed)
                        self.send_error(503)
                else:
                    self._forward(body)

            def _forward(self, body: bytes | None) -> None:
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "authorization", "accept")
                }
                request = urllib.request.Request(
                    f"{origin}{self.path}", data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=600) as answer:
                        status, head, data = answer.status, answer.headers, answer.read()
                except urllib.error.HTTPError as refused:
                    status, head, data = refused.code, refused.headers, refused.read()
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    for key, value in head.items():
                        if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                            self.send_header(key, value)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> HoldingServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class Lines:
    """A process's output, read line by line in a thread: :meth:`wait_for` waits until a
    line holding some text has been printed (an event, never a sleep)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._done = False
        assert process.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        with stream:
            for line in stream:
                with self._changed:
                    self.lines.append(line)
                    self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 300) -> str:
        with self._changed:
            found = self._changed.wait_for(
                lambda: self._done or any(text in line for line in self.lines), timeout
            )
            hits = [line for line in self.lines if text in line]
        assert found and hits, f"no line with {text!r} in:\n{''.join(self.lines)}"
        return hits[0]

    def text(self) -> str:
        self._thread.join(timeout=600)
        return "".join(self.lines)


@pytest.fixture
def store(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database on the test session's server, with the campaign extra installed
    (without it these tests skip, and fail under CI, whose .ci/run installs it)."""
    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        why = f"the campaign extra is not installed ({', '.join(missing)} missing)"
        if in_ci():
            pytest.fail(f"CI must run the campaign tests: {why}")
        pytest.skip(why)
    name = "campaign_test"
    postgres_server.drop_database(name)
    postgres_server.create_database(name)
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.drop_database(name)


def _worker(url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "image_project",
            "worker",
            "--store",
            url,
            "--stalled-after",
            STALLED_AFTER,
            *extra,
        ],
        env=ENV,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _jobs(url: str) -> list[tuple[int, str, int, int | None]]:
    """Every run job: (index, status, attempts, worker id)."""
    with psycopg.connect(conninfo(url)) as conn:
        rows = conn.execute(
            "SELECT (args->>'index')::int, status::text, attempts, worker_id "
            "FROM procrastinate_jobs WHERE task_name = %s ORDER BY 1",
            (TASK,),
        ).fetchall()
    return [(int(i), str(s), int(a), w) for i, s, a, w in rows]


def test_three_workers_make_a_batchs_runs_once_each_though_one_is_killed_mid_run(
    tmp_path: Path, store: str
) -> None:
    sim = RemoteSimulator(chat_median_s=0.02, image_median_s=0.05)
    with sim.serve() as base_url, HoldingServer() as local:
        # The reference: the same runs, one after another, in one process (no store).
        reference = tmp_path / "batch"
        batch = ["--runs", str(RUNS), "--parallel", "1", "--seed", str(SEED), "-q"]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "image_project",
                *batch,
                "--set",
                "store.enabled=false",
                *_outputs(reference, base_url),
            ],
            env=ENV,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        sim.reset()

        # The campaign: queued once, then three workers.
        camp = tmp_path / "campaign"
        submit = ["campaign", "submit", "--runs", str(RUNS), "--seed", str(SEED)]
        assert main([*submit, "--set", f"store.url={store}", *_outputs(camp, base_url)]) == 0
        [counts] = campaign_status(store)
        assert (counts.queued, counts.runs) == (RUNS, RUNS)
        campaign = counts.campaign

        # Worker 1 (a machine with its own local server) takes one run and is killed while
        # that run waits for its first model answer.
        victim = _worker(store, "--parallel", "1", "--set", f"backend.base_url={local.base_url}")
        try:
            assert local.called.wait(timeout=300), "worker 1 never sent a model call"
            [taken] = [j for j in _jobs(store) if j[1] == "doing"]
            sim.set_rate_limit(LIMIT, WINDOW_S)
            os.kill(victim.pid, signal.SIGKILL)
        finally:
            victim.kill()
            victim.communicate(timeout=60)
        assert victim.returncode == -signal.SIGKILL

        # Workers 2 and 3 (one key, one shared budget) make every run, the dead one's too.
        workers = [_worker(store, "--parallel", "2", "--until-done") for _ in range(2)]
        outputs = [w.communicate(timeout=600)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0], outputs
        records: list[CallRecord] = sim.records
        sim.set_rate_limit(0, 1.0)

    # Every run done once; the dead worker's run was queued again (one more attempt).
    [counts] = campaign_status(store)
    assert (counts.done, counts.running, counts.failed, counts.queued) == (RUNS, 0, 0, 0)
    jobs = _jobs(store)
    assert [j[0] for j in jobs] == list(range(RUNS))
    assert {j[0]: j[2] for j in jobs} == {i: 2 if i == taken[0] else 1 for i in range(RUNS)}
    assert any("queued again" in out for out in outputs)

    # Recorded exactly once: one store row per run under its campaign id, seq unique.
    with psycopg.connect(conninfo(store)) as conn:
        rows = conn.execute("SELECT generation_id, status, seq FROM runs").fetchall()
    assert sorted(r[0] for r in rows) == [generation_id_for(campaign, i) for i in range(RUNS)]
    assert {r[1] for r in rows} == {"ok"}
    assert sorted(r[2] for r in rows) == list(range(1, RUNS + 1))

    # The same runs as the batch: per seed, the same requests, answers and picks.
    made, expected = _by_seed(camp / "logs"), _by_seed(reference / "logs")
    assert len(expected) == RUNS and made.keys() == expected.keys()
    for seed, record in expected.items():
        assert _normal(made[seed]) == _normal(record), f"run with seed {seed} differs"

    # One budget for both workers: no 429 once the first window has passed.
    t0 = min(r.started for r in records)
    late = [r for r in records if r.status == 429 and r.started > t0 + WINDOW_S]
    assert late == [], f"{len(late)} requests refused after the first window"


def test_one_budget_holds_every_process_of_a_key_to_its_window(store: str) -> None:
    """Two budgets of one key (two workers' worth) never let more than the limit through in
    any window of the database's clock; another key's budget is not held by theirs; a third
    process of the key that has heard no answer spends at the rate the others learned."""
    name = budget_name("http://127.0.0.1:1/v1", "sk-one")
    budgets = [PostgresBudget(conninfo(store), name) for _ in range(2)]
    other = PostgresBudget(conninfo(store), budget_name("http://127.0.0.1:1/v1", "sk-two"))
    try:
        for budget in budgets:
            budget.learn(4, 0.4)  # 4 requests per window; the window rounds up to 1 s (+0.1)
        other.learn(4, 0.4)

        import anyio

        async def spend_all() -> None:
            async with anyio.create_task_group() as tg:
                for budget in budgets:
                    for _ in range(6):
                        tg.start_soon(budget.spend)

        anyio.run(spend_all)
        with psycopg.connect(conninfo(store)) as conn:
            stamps = [
                float(r[0])
                for r in conn.execute(
                    f'SELECT extract(epoch FROM item_timestamp) FROM "ratelimit___{name}" '
                    "ORDER BY item_timestamp"
                ).fetchall()
            ]
        assert [b.rate for b in budgets] == [(4, 1100)] * 2
        assert len(stamps) == 12
        # Any 5 consecutive requests span more than the window: at most 4 in any window.
        assert all(stamps[i + 4] - stamps[i] >= 1.1 - 1e-3 for i in range(len(stamps) - 4))
        assert sum(b.waited_s for b in budgets) > 0

        async def spend_other() -> list[float]:
            return [await other.spend() for _ in range(4)]

        assert anyio.run(spend_other) == [0.0] * 4, "another key has its own budget"

        # A process of the key that has heard no answer yet takes the rate the others learned.
        late = PostgresBudget(conninfo(store), name)
        budgets.append(late)
        anyio.run(late.spend)
        assert late.rate == (4, 1100)
    finally:
        for budget in [*budgets, other]:
            budget.close()


def test_a_campaign_names_its_extra_when_its_libraries_are_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "procrastinate", None)
    with pytest.raises(ConfigError) as caught:
        require_campaign("postgresql+psycopg://u@127.0.0.1/db")
    assert "pip install 'image_project[campaign]'" in str(caught.value)
    assert "procrastinate" in str(caught.value)


@pytest.mark.parametrize(
    "command", [["campaign", "submit", "--runs", "2", "--offline"], ["worker"]]
)
def test_a_campaign_on_a_sqlite_store_exits_2_asking_for_postgresql(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    code = main([*command, "--set", f"store.url={url}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "store.url" in err and "PostgreSQL" in err
    assert not (tmp_path / "runs.sqlite").exists(), "nothing was written"


@pytest.mark.parametrize(
    "command",
    [["campaign", "submit", "--runs", "2", "--offline"], ["campaign", "status"], ["worker"]],
)
def test_every_campaign_command_takes_its_store_from_the_store_option(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    code = main([*command, "--store", url])
    assert code == 2
    err = capsys.readouterr().err
    assert "--store" in err and "PostgreSQL" in err
    assert not (tmp_path / "runs.sqlite").exists(), "nothing was written"


def _batch(tmp: Path, base_url: str, *extra: str) -> None:
    """``image-project --parallel 1 -q`` with ``extra`` (runs, seed, store), outputs in
    ``tmp``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "image_project",
            "--parallel",
            "1",
            "-q",
            *extra,
            *_outputs(tmp, base_url),
        ],
        env=ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr


@contextlib.contextmanager
def _worker_holding_its_first_call(
    tmp_path: Path, store: str, runs: int
) -> Iterator[tuple[subprocess.Popen[str], Lines, HoldingServer]]:
    """A campaign of ``runs`` runs and a worker at ``--parallel 1`` whose first model call is
    held (released by ``held.release``); the worker is killed on the way out."""
    sim = RemoteSimulator(chat_median_s=0.01, image_median_s=0.01)
    with sim.serve() as base_url, HoldingServer(base_url) as held:
        submit = ["campaign", "submit", "--runs", str(runs), "--seed", str(SEED)]
        assert main([*submit, "--set", f"store.url={store}", *_outputs(tmp_path, base_url)]) == 0
        worker = _worker(store, "--parallel", "1", "--set", f"backend.base_url={held.base_url}")
        try:
            out = Lines(worker)
            assert held.called.wait(timeout=300), "the worker never sent a model call"
            yield worker, out, held
        finally:
            held.release.set()
            worker.kill()
            worker.wait(timeout=60)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_worker_takes_no_new_run_and_finishes_the_one_in_flight(
    tmp_path: Path, store: str, signum: signal.Signals
) -> None:
    with _worker_holding_its_first_call(tmp_path, store, runs=3) as (worker, out, held):
        worker.send_signal(signum)
        out.wait_for(f"{signum.name}: taking no new run")
        held.release.set()  # the run in flight goes on
        assert worker.wait(timeout=300) == 0, out.text()
    text = out.text()
    assert "worker: 1 run(s) made" in text
    assert sorted(j[1] for j in _jobs(store)) == ["succeeded", "todo", "todo"]
    [counts] = campaign_status(store)
    assert (counts.done, counts.running, counts.failed, counts.queued) == (1, 0, 0, 2)
    with psycopg.connect(conninfo(store)) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("ok",)]


def test_a_second_signal_quits_a_worker_at_once_and_says_its_run_goes_back(
    tmp_path: Path, store: str
) -> None:
    with _worker_holding_its_first_call(tmp_path, store, runs=2) as (worker, out, _held):
        worker.send_signal(signal.SIGTERM)
        out.wait_for("SIGTERM: taking no new run")
        worker.send_signal(signal.SIGTERM)  # the run in flight is still held
        assert worker.wait(timeout=300) == 128 + signal.SIGTERM, out.text()
    last = out.text().rstrip().splitlines()[-1]
    assert last.startswith("SIGTERM again: quitting at once (exit 143)"), last
    assert "go back to the queue after --stalled-after" in last and "runs list" not in last
    assert sorted(j[1] for j in _jobs(store)) == ["doing", "todo"]


@pytest.mark.parametrize(
    ("machine", "why"),
    [
        (["--set", "prompt.categories_path=no/such/categories.csv"], "InputFileError"),
        (["--set", "backend.base_url=http://127.0.0.1:9/v1"], "cannot be used: GET"),
    ],
    ids=["a-missing-local-file", "a-pre-flight-that-fails"],
)
def test_a_worker_that_cannot_set_up_puts_the_run_back_and_exits_1(
    tmp_path: Path, store: str, machine: list[str], why: str
) -> None:
    sim = RemoteSimulator(chat_median_s=0.01, image_median_s=0.01)
    with sim.serve() as base_url:
        submit = ["campaign", "submit", "--runs", "2", "--seed", str(SEED)]
        assert main([*submit, "--set", f"store.url={store}", *_outputs(tmp_path, base_url)]) == 0
        broken = _worker(store, "--parallel", "2", "--until-done", *machine)
        text = broken.communicate(timeout=300)[0]
        assert broken.returncode == 1, text
        assert "cannot make the runs of" in text and why in text
        assert "put back in the queue for another worker" in text
        [counts] = campaign_status(store)
        assert (counts.done, counts.running, counts.failed, counts.queued) == (0, 0, 0, 2)
        # The message above is said inside a run's job, so the broken worker took one; whether
        # procrastinate counts that as an attempt (its retry) or resets the job as the worker
        # stops depends on which comes first, so each job's count is carried over, not assumed.
        before = {index: attempts for index, _, attempts, _ in _jobs(store)}

        good = _worker(store, "--parallel", "2", "--until-done")
        text = good.communicate(timeout=300)[0]
        assert good.returncode == 0, text
    [counts] = campaign_status(store)
    assert (counts.done, counts.running, counts.failed, counts.queued) == (2, 0, 0, 0)
    assert {index: attempts for index, _, attempts, _ in _jobs(store)} == {
        index: n + 1 for index, n in before.items()
    }


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["worker", "--store", "{url}"], "worker: cannot reach the store"),
        (["campaign", "status", "--store", "{url}"], "error: cannot reach the store"),
        (
            ["campaign", "submit", "--runs", "2", "--offline", "--set", "store.url={url}"],
            "error: cannot reach the store",
        ),
    ],
    ids=["worker", "status", "submit"],
)
def test_a_store_that_cannot_be_reached_exits_1_before_any_run(
    command: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("procrastinate") is None:
        pytest.skip("the campaign extra is not installed")
    from tests.store.conftest import free_port

    url = f"postgresql+psycopg://me:s3cret@127.0.0.1:{free_port()}/runs"
    assert main([arg.format(url=url) for arg in command]) == 1
    err = capsys.readouterr().err
    assert f"{said} postgresql+psycopg://me:***@127.0.0.1:" in err
    assert "s3cret" not in err
    assert "Traceback" not in err


def test_every_worker_reads_the_history_of_the_store_not_its_own_files(
    tmp_path: Path, store: str
) -> None:
    """Two workers whose machines hold different histories (one an older run of its own, the
    other none) make a scoring campaign's runs as a batch on a machine whose files hold
    what the store held at submit: per seed, the same requests, answers and picks."""
    scoring = ["--set", "prompt.scoring.enabled=true"]
    sim = RemoteSimulator(chat_median_s=0.01, image_median_s=0.01)
    with sim.serve() as base_url, HoldingServer(base_url) as held:
        # The shared history: two runs recorded in the store (and in this machine's files).
        shared = tmp_path / "shared"
        _batch(
            shared, base_url, "--runs", "2", "--seed", "11", *scoring, "--set", f"store.url={store}"
        )
        # The reference: a batch on a machine whose files hold exactly that history.
        reference = tmp_path / "reference"
        (reference / "images").mkdir(parents=True)
        (reference / "generations.csv").write_bytes((shared / "generations.csv").read_bytes())
        manifest = shared / "images" / "titles_manifest.csv"
        (reference / "images" / manifest.name).write_bytes(manifest.read_bytes())
        _batch(
            reference,
            base_url,
            "--runs",
            "2",
            "--seed",
            str(SEED),
            *scoring,
            "--set",
            "store.enabled=false",
        )
        # Machine A has a history of its own (one run the store never saw); machine B none.
        machine_a, machine_b = tmp_path / "a", tmp_path / "b"
        _batch(machine_a, base_url, "--seed", "12", *scoring, "--set", "store.enabled=false")

        submit = ["campaign", "submit", "--runs", "2", "--seed", str(SEED), *scoring]
        assert main([*submit, "--set", f"store.url={store}", *_outputs(shared, base_url)]) == 0
        # A takes one run and is held at its first call until B has taken the other.
        a = _worker(
            store,
            "--until-done",
            *_outputs(machine_a, held.base_url),
        )
        b: subprocess.Popen[str] | None = None
        try:
            a_out = Lines(a)
            assert held.called.wait(timeout=300), "worker A never sent a model call"
            b = _worker(store, "--until-done", *_outputs(machine_b, base_url))
            b_out = Lines(b)
            b_out.wait_for("started (seed")
            held.release.set()
            assert [a.wait(timeout=300), b.wait(timeout=300)] == [0, 0]
        finally:
            for worker in (a, b):
                if worker is not None:
                    worker.kill()
                    worker.wait(timeout=60)
    assert "worker: 1 run(s) made" in a_out.text()
    assert "worker: 1 run(s) made" in b_out.text()

    expected = _by_seed(reference / "logs")
    made = {**_by_seed(machine_a / "logs"), **_by_seed(machine_b / "logs")}
    made = {seed: t for seed, t in made.items() if seed in expected}
    assert len(expected) == 2 and made.keys() == expected.keys()
    for seed, record in expected.items():
        novelty = made[seed]["blackbox_scoring"]["novelty"]
        assert (novelty["used"], novelty["rows"]) == (True, 2), "the store's two runs"
        # Worker A's backend line names the holding server it was pointed at.
        assert _normal(_undescribed(made[seed])) == _normal(_undescribed(record)), (
            f"run with seed {seed} differs"
        )


def _undescribed(transcript: dict[str, Any]) -> dict[str, Any]:
    return {**transcript, "backend": {**transcript["backend"], "description": None}}


def test_a_worker_given_a_set_that_is_not_valid_configuration_exits_2_at_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.store.conftest import free_port

    nowhere = f"postgresql+psycopg://u@127.0.0.1:{free_port()}/runs"  # never reached
    code = main(["worker", "--store", nowhere, "--set", "prompt.scoring.num_ideas=1"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("configuration error: prompt.scoring.num_ideas: got 1")
    assert "store" not in err
