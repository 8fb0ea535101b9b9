"""The pre-flight model check against a local server whose ``GET /models`` hiccups first:
retried with the backend's transport retry policy (waits recorded, never slept), recorded in
the transcript, and failing only after the retries, naming the status; the ``preflight``
modes and the ``models/`` prefix."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.backends import probe
from image_project.backends.factory import make_backends, preflight_mode
from image_project.backends.probe import ModelNeed, ProbeTarget, probe_backends
from image_project.backends.retry import RetryPolicy
from image_project.cli.command import main
from image_project.config.loading import load_config
from image_project.config.models import BackendConfig
from image_project.errors import ConfigError
from tests.faults.common import REPO, write_config
from tests.support import RecordingSleep
from tests.support.openai_server import OpenAIServer, Reply


@pytest.fixture(autouse=True)
def probe_waits(monkeypatch: pytest.MonkeyPatch) -> RecordingSleep:
    """The probe's waits between attempts, recorded instead of slept."""
    sleep = RecordingSleep()
    monkeypatch.setattr(probe, "_sleep", sleep)
    return sleep


def _run(tmp_path: Path, server: OpenAIServer, **backend: Any) -> tuple[int, dict[str, Any]]:
    config = write_config(
        tmp_path, base_url=server.base_url, backend={"text_model": "tiny", **backend}
    )
    code = main(["--config", str(config), "--seed", "3", "--prompt-only"], env={}, root=REPO)
    transcripts = sorted((tmp_path / "out" / "logs").glob("*_transcript.json"))
    record = json.loads(transcripts[-1].read_text("utf-8")) if transcripts else {}
    return code, record


def test_one_503_on_the_model_list_is_retried_and_the_run_succeeds(
    tmp_path: Path, allow_loopback: None, probe_waits: RecordingSleep
) -> None:
    with OpenAIServer(models=["tiny"], offline=True) as server:
        server.model_list_faults.append(Reply(status=503))
        code, record = _run(tmp_path, server)
        assert (code, server.model_listings) == (0, 2)
    (checked,) = record["backend"]["preflight"]
    assert checked["outcome"] == "listed" and checked["attempts"] == 2
    assert checked["retried"] == ["HTTP 503"]
    assert len(probe_waits.waits) == 1


def test_a_429_with_retry_after_1_is_waited_for_then_the_run_succeeds(
    tmp_path: Path, allow_loopback: None, probe_waits: RecordingSleep
) -> None:
    with OpenAIServer(models=["tiny"], offline=True) as server:
        server.model_list_faults.append(Reply(status=429, headers={"Retry-After": "1"}))
        code, record = _run(tmp_path, server)
        assert (code, server.model_listings) == (0, 2)
    (checked,) = record["backend"]["preflight"]
    assert checked["retried"] == ["HTTP 429 (Retry-After 1 s)"]
    (waited,) = probe_waits.waits
    assert 1.0 <= waited <= 1.1  # the server's wait, never less (plus up to 10% jitter)


def test_a_model_list_that_keeps_failing_fails_after_the_attempts_naming_the_status(
    tmp_path: Path,
    allow_loopback: None,
    probe_waits: RecordingSleep,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with OpenAIServer(models=["tiny"], offline=True) as server:
        server.model_list_faults.extend(Reply(status=503) for _ in range(3))
        code, record = _run(tmp_path, server, max_attempts=3)
        assert (code, server.model_listings, server.requests) == (2, 3, [])
    err = capsys.readouterr().err
    assert "backend.base_url" in err and "answered HTTP 503 on each of 3 attempts" in err
    assert len(probe_waits.waits) == 2 and record == {}


def _target(server: OpenAIServer, mode: Any, *models: str) -> ProbeTarget:
    needs = tuple(ModelNeed("text", "backend.text_model", m) for m in models)
    return ProbeTarget(
        "backend", server.base_url, "k", "K", 5.0, needs, retry=RetryPolicy(), mode=mode
    )


def test_listed_ids_match_with_or_without_the_models_prefix() -> None:
    with OpenAIServer(models=["models/gemini-3-flash", "plain"]) as server:
        (checked,) = anyio.run(
            probe_backends, [_target(server, "strict", "gemini-3-flash", "models/plain")]
        )
    assert checked.outcome == "listed" and checked.warnings == ()


def test_warn_lets_a_missing_model_through_with_a_warning_and_off_does_not_ask(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with OpenAIServer(models=["gpt-4o"]) as server:
        with pytest.raises(ConfigError, match="preflight: warn"):
            anyio.run(probe_backends, [_target(server, "strict", "my-deployment")])
        (warned,) = anyio.run(probe_backends, [_target(server, "warn", "my-deployment")])
        assert warned.outcome == "listed" and "'my-deployment'" in warned.warnings[0]
        assert "my-deployment" in caplog.text
        (off,) = anyio.run(probe_backends, [_target(server, "off", "my-deployment")])
        assert (off.outcome, off.attempts, server.model_listings) == ("off", 0, 2)


@pytest.mark.parametrize(
    ("base_url", "mode"),
    [
        (None, "strict"),
        ("https://api.openai.com/v1", "strict"),
        ("http://127.0.0.1:8080/v1", "strict"),
        ("http://localhost:11434/v1", "strict"),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", "warn"),
        ("https://me.openai.azure.com/openai/v1", "warn"),
        ("https://openrouter.ai/api/v1", "warn"),
    ],
)
def test_auto_is_strict_for_openai_and_this_machine_and_warn_elsewhere(
    base_url: str | None, mode: str
) -> None:
    assert preflight_mode(BackendConfig(base_url=base_url)) == mode
    assert preflight_mode(BackendConfig(base_url=base_url, preflight="off")) == "off"


def test_each_backend_carries_its_own_preflight_mode_and_retry_policy() -> None:
    cfg = load_config(
        root=REPO,
        env={},
        overrides=[
            "backend.base_url=http://127.0.0.1:9/v1",
            "backend.max_attempts=2",
            "backends.gemini.base_url=https://generativelanguage.googleapis.com/v1beta/openai/",
            "backends.gemini.max_attempts=5",
            "backends.proxy.base_url=https://llm.example.com/v1",
            "backends.proxy.preflight=off",
            "prompt.scoring.enabled=true",
            "prompt.scoring.judges=[{id: a, backend: gemini}, {id: b, backend: proxy}]",
            "run.mode=prompt_only",
        ],
    )
    targets = {t.key: t for t in make_backends(cfg, {"OPENAI_API_KEY": "k"}).probes}
    assert {k: t.mode for k, t in targets.items()} == {
        "backend": "strict",
        "backends.gemini": "warn",
        "backends.proxy": "off",
    }
    assert targets["backend"].retry.max_attempts == 2
    assert targets["backends.gemini"].retry.max_attempts == 5


def test_a_connection_cut_is_retried_and_a_refused_one_is_said_at_once(
    tmp_path: Path, allow_loopback: None, probe_waits: RecordingSleep
) -> None:
    with OpenAIServer(models=["tiny"], offline=True) as server:
        server.model_list_faults.append(Reply(disconnect=True))
        code, record = _run(tmp_path, server)
        assert (code, server.model_listings) == (0, 2)
    (checked,) = record["backend"]["preflight"]
    assert checked["retried"] == ["connection cut"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        target = ProbeTarget("backend", url, "k", "K", 5.0, (), retry=RetryPolicy())
        with pytest.raises(ConfigError, match=r"^backend\.base_url: .*/models failed"):
            anyio.run(probe_backends, [target])
    assert len(probe_waits.waits) == 1  # the cut connection's retry only
