"""Backends per role: the ``backends:`` mapping, the role references, routing,
the per-backend model checks, the pre-flight probe, and what the run records."""

from __future__ import annotations

import json
import socket
from datetime import date
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.backends.base import Message, TextRequest
from image_project.backends.factory import make_backends
from image_project.backends.offline.image import OfflineImageBackend
from image_project.backends.offline.text import OfflineTextBackend
from image_project.backends.openai_backend import OpenAIImageBackend, OpenAITextBackend
from image_project.backends.probe import ModelNeed, ProbeTarget, probe_backends
from image_project.backends.routing import RoutingTextBackend
from image_project.cli.command import main
from image_project.config.capabilities import check_models
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import ConfigError
from image_project.testing import FunctionTextBackend
from tests.support.openai_server import OpenAIServer, Reply, error_body
from tests.test_cli import REPO, write_config

LOCAL = "http://127.0.0.1:9/v1"
SCORING: dict[str, Any] = {"enabled": True, "num_ideas": 2}


def load(*overrides: str) -> AppConfig:
    return load_config(root=REPO, overrides=overrides, env={})


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "key",
    [
        "image.backend",
        "prompt.scoring.judge_backend",
        "prompt.scoring.evolution.selector_backend",
    ],
)
def test_an_unknown_backend_name_is_a_config_error_naming_the_key_and_the_known_names(
    key: str,
) -> None:
    with pytest.raises(ConfigError) as info:
        load("backends.local.base_url=http://127.0.0.1:8080/v1", f"{key}=locl")
    assert info.value.key == key
    assert "'locl'" in info.value.message and "'local'" in info.value.message
    assert "'offline'" in info.value.message


def test_a_judges_unknown_backend_names_its_index() -> None:
    with pytest.raises(ConfigError) as info:
        load("prompt.scoring.judges=[{id: a}, {id: b, backend: nope}]")
    assert info.value.key == "prompt.scoring.judges[1].backend"
    assert "none defined" in info.value.message


def test_offline_is_reserved_and_names_are_checked() -> None:
    with pytest.raises(ConfigError) as info:
        load("backends.offline.text_model=x")
    assert info.value.key == "backends.offline" and "reserved" in info.value.message
    with pytest.raises(ConfigError) as info:
        load("backends.a b.text_model=x")
    assert info.value.key == "backends.a b"


def test_a_named_backend_is_a_whole_backend_section() -> None:
    with pytest.raises(ConfigError) as info:
        load("backends.local.text_modle=x")
    assert info.value.key == "backends.local.text_modle"
    assert "did you mean 'text_model'" in info.value.message
    with pytest.raises(ConfigError) as info:
        load("backends.local.timeout_s=0")
    assert info.value.key == "backends.local.timeout_s"
    cfg = load("backends.local.base_url=http://127.0.0.1:8080/v1", "image.backend=offline")
    assert cfg.backends["local"].base_url == "http://127.0.0.1:8080/v1"
    assert cfg.backends["local"].max_attempts == cfg.backend.max_attempts  # same defaults


def test_a_judges_model_defaults_to_its_backends_text_model() -> None:
    cfg = load(
        "backends.local.text_model=small",
        "prompt.scoring.judges=[{id: a}, {id: b, backend: local}, {id: c, backend: local, model: m}]",
        "prompt.scoring.evolution.selector_backend=local",
    )
    scoring = cfg.prompt.scoring
    judges = scoring.effective_judges("main-model", {"local": "small"})
    assert [(j.id, j.backend, j.model) for j in judges] == [
        ("a", None, "main-model"),
        ("b", "local", "small"),
        ("c", "local", "m"),
    ]
    assert scoring.selector_backend == "local"
    assert scoring.effective_selector_model("main-model", {"local": "small"}) == "small"
    cfg = load("backends.j.text_model=jm", "prompt.scoring.judge_backend=j")
    (judge,) = cfg.prompt.scoring.effective_judges("main-model", {"j": "jm"})
    assert (judge.backend, judge.model) == ("j", "jm")
    assert cfg.prompt.scoring.selector_backend == "j"  # the selector follows judge_backend


# --------------------------------------------------------------------------- factory


def test_real_text_with_the_offline_preview_image() -> None:
    cfg = load(f"backend.base_url={LOCAL}", "image.backend=offline")
    backends = make_backends(cfg, {})
    assert isinstance(backends.text, OpenAITextBackend)
    assert isinstance(backends.image, OfflineImageBackend)
    assert backends.provider == "openai"
    assert "image: offline preview image" in backends.description
    assert "Roles: image: offline preview image; the rest: the main backend." in (
        backends.description
    )
    assert "http://127.0.0.1:9/v1 (text model gpt-6-luna" in backends.description
    (target,) = backends.probes
    assert target.key == "backend" and target.base_url.startswith("http://127.0.0.1:9/v1")
    assert target.needs == (ModelNeed("text", "backend.text_model", "gpt-6-luna"),)


def test_a_prompt_only_run_builds_and_probes_no_image_role() -> None:
    cfg = load(f"backend.base_url={LOCAL}", "run.mode=prompt_only")
    backends = make_backends(cfg, {})
    (target,) = backends.probes
    assert [need.role for need in target.needs] == ["text"]
    assert "Roles:" not in backends.description  # one backend serves everything: as before


def test_judges_and_the_selector_on_other_backends_are_routed() -> None:
    cfg = load(
        "backends.local.base_url=http://127.0.0.1:8080/v1",
        "backends.local.text_model=small",
        "prompt.scoring.enabled=true",
        "prompt.scoring.judges=[{id: a}, {id: b, backend: local}, {id: c, backend: offline}]",
        "prompt.scoring.evolution={enabled: true, selector: llm, selector_backend: local, "
        "survivors: 2}",
    )
    backends = make_backends(cfg, {"OPENAI_API_KEY": "k"})
    assert isinstance(backends.text, RoutingTextBackend)
    assert isinstance(backends.text.main, OpenAITextBackend)
    assert isinstance(backends.text.backend_for("offline"), OfflineTextBackend)
    local = backends.text.backend_for("local")
    assert isinstance(local, OpenAITextBackend) and local.default_model == "small"
    assert isinstance(backends.image, OpenAIImageBackend)
    assert backends.text_models["local"] == "small"
    assert backends.text_models["offline"] == OfflineTextBackend().default_model
    assert [t.key for t in backends.probes] == ["backend", "backends.local"]
    main_target, local_target = backends.probes
    assert [n.role for n in main_target.needs] == ["text", "image", "judge 'a'"]
    assert local_target.needs == (
        ModelNeed("judge 'b'", "backends.local.text_model", "small"),
        ModelNeed("the LLM selector", "backends.local.text_model", "small"),
    )
    description = backends.description
    assert "judge 'b': backends.local at http://127.0.0.1:8080/v1 (model small)" in description
    assert "judge 'c': offline" in description
    assert "the LLM selector: backends.local" in description
    with pytest.raises(KeyError, match="no text backend named 'x'"):
        backends.text.backend_for("x")
    anyio.run(backends.aclose)


def test_a_named_backend_needing_a_key_says_which_section() -> None:
    cfg = load(
        "backends.paid.provider=openai", "backends.paid.api_key_env=PAID_KEY", "image.backend=paid"
    )
    with pytest.raises(Exception, match=r"backends\.paid\.provider is openai .*PAID_KEY"):
        make_backends(cfg, {})
    # A prompt-only run has no image role, so the image's backend is never built.
    prompt_only = cfg.model_copy(update={"run": cfg.run.model_copy(update={"mode": "prompt_only"})})
    assert isinstance(make_backends(prompt_only, {}).text, OfflineTextBackend)


def test_routing_sends_each_request_to_the_backend_it_names() -> None:
    main_backend = FunctionTextBackend(lambda r: "main", label="main", default_model="m")
    other = FunctionTextBackend(lambda r: "other", label="other", default_model="o")
    router = RoutingTextBackend(main_backend, {"other": other})
    ask = TextRequest(messages=(Message("user", "hi"),), temperature=0.0)
    assert anyio.run(router.complete, ask).text == "main"
    routed = TextRequest(messages=(Message("user", "hi"),), temperature=0.0, backend="other")
    assert anyio.run(router.complete, routed).text == "other"
    assert (router.label, router.default_model) == ("main", "m")
    assert len(main_backend.requests) == len(other.requests) == 1


def test_model_checks_apply_per_backend_to_the_models_it_serves() -> None:
    late = date(2031, 1, 1)  # gpt-4.1-mini is shut down by then
    cfg = load(
        "backends.local.base_url=http://127.0.0.1:8080/v1",
        "prompt.scoring.enabled=true",
        "prompt.scoring.judges=[{id: a, backend: offline, model: gpt-4.1-mini}]",
    )
    check_models(cfg, today=late)  # the offline judge's model is not checked
    cfg = load(
        "backends.local.base_url=http://127.0.0.1:8080/v1",
        "backends.local.text_model=gpt-4.1-mini",
        "prompt.scoring.enabled=true",
        "prompt.scoring.judges=[{id: a, backend: local}]",
    )
    check_models(cfg, today=late)  # local is not served by the OpenAI provider here
    with pytest.raises(ConfigError) as info:
        check_models(cfg, today=late, openai_refs=(None, "local"))
    assert info.value.key == "backends.local.text_model"
    with pytest.raises(ConfigError, match="shut down"):
        check_models(load("image.model=dall-e-3"), today=late)
    check_models(load("image.model=dall-e-3", "image.backend=offline"), today=late)


# --------------------------------------------------------------------------- probe


def _target(server: OpenAIServer, *needs: ModelNeed) -> ProbeTarget:
    return ProbeTarget("backend", server.base_url, "k", "OPENAI_API_KEY", 5.0, needs)


TEXT = ModelNeed("text", "backend.text_model", "tiny")
IMAGE = ModelNeed("image", "image.model", "gpt-image-2.6-sunburst")


def test_the_probe_passes_listed_models_and_servers_without_a_list() -> None:
    with OpenAIServer(models=["tiny", "gpt-image-2.6-sunburst"]) as server:
        anyio.run(probe_backends, [_target(server, TEXT, IMAGE)])
        assert server.model_listings == 1 and server.requests == []
    with OpenAIServer() as server:  # /models is a 404: nothing to compare with
        anyio.run(probe_backends, [_target(server, TEXT, IMAGE)])
        assert server.model_listings == 1


def test_the_probe_names_the_role_the_key_the_url_and_what_is_listed() -> None:
    with OpenAIServer(models=["tiny"]) as server, pytest.raises(ConfigError) as info:
        anyio.run(probe_backends, [_target(server, TEXT, IMAGE)])
    error = info.value
    assert error.key == "image.model"
    assert server.base_url in error.message and "'tiny'" in error.message
    assert "--set image.backend=offline" in error.message and "--prompt-only" in error.message
    with OpenAIServer(models=["other"]) as server, pytest.raises(ConfigError) as info:
        anyio.run(probe_backends, [_target(server, TEXT)])
    assert info.value.key == "backend.text_model"
    assert "set backend.text_model to one of them" in info.value.message


def test_an_unreachable_endpoint_or_a_refused_key_fails_the_probe() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connection refused
        target = ProbeTarget(
            "backends.local", f"http://127.0.0.1:{port}/v1", "k", "K", 5.0, (TEXT,)
        )
        with pytest.raises(ConfigError) as info:
            anyio.run(probe_backends, [target])
    assert info.value.key == "backends.local.base_url"
    assert f"GET http://127.0.0.1:{port}/v1/models failed" in info.value.message
    assert "text" in info.value.message
    with OpenAIServer() as refusing:  # answers GET /models with 401, as for a wrong key
        refusing.model_list_faults.append(
            Reply(401, body=error_body("bad key", type="invalid_api_key"))
        )
        target = ProbeTarget("backend", refusing.base_url, "k", "MY_KEY", 5.0, (TEXT,))
        with pytest.raises(ConfigError) as info:
            anyio.run(probe_backends, [target])
    assert info.value.key == "backend.api_key_env" and "$MY_KEY" in info.value.message


# --------------------------------------------------------------------------- the CLI


def test_full_mode_against_a_text_only_server_fails_before_the_first_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    with OpenAIServer(models=["tiny"], offline=True) as server:
        config = write_config(tmp_path, backend={"base_url": server.base_url, "text_model": "tiny"})
        code = main(["--config", str(config), "--seed", "3"], env={}, root=REPO)
        assert (code, len(server.requests), server.model_listings) == (2, 0, 1)
        err = capsys.readouterr().err
        assert "configuration error: image.model:" in err
        assert "--set image.backend=offline" in err
        assert not list((tmp_path / "out" / "logs").glob("*_transcript.json"))

        code = main(
            ["--config", str(config), "--seed", "3", "--set", "image.backend=offline"],
            env={},
            root=REPO,
        )
        out = capsys.readouterr().out
        assert code == 0, out
        assert "image: offline preview image" in out
        assert server.requests and all(not r.is_image for r in server.requests)
    (t_path,) = (tmp_path / "out" / "logs").glob("*_transcript.json")
    data = json.loads(t_path.read_text(encoding="utf-8"))
    assert "image: offline preview image" in data["backend"]["description"]
    image = next(step for step in data["steps"] if step["type"] == "image")
    assert image["model"] == OfflineImageBackend().default_model


def test_judges_on_their_own_server_answer_there_and_are_recorded_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow_loopback: None
) -> None:
    with (
        OpenAIServer(offline=True, models=["main-model", "gpt-image-2.6-sunburst"]) as main_srv,
        OpenAIServer(offline=True, models=["judge-model"]) as judge_srv,
    ):
        config = write_config(
            tmp_path,
            backend={"base_url": main_srv.base_url, "text_model": "main-model"},
            backends={"judging": {"base_url": judge_srv.base_url, "text_model": "judge-model"}},
            prompt={
                "scoring": {
                    **SCORING,
                    "judges": [{"id": "a"}, {"id": "b", "backend": "judging"}],
                    "min_ok_judges": 1,
                }
            },
        )
        code = main(["--config", str(config), "--seed", "5"], env={}, root=REPO)
        out = capsys.readouterr().out
        assert code == 0, out
        judged_there = [r.body["model"] for r in judge_srv.requests]
        assert judged_there == ["judge-model"]
        assert all(r.body.get("model") != "judge-model" for r in main_srv.requests)
        assert (main_srv.model_listings, judge_srv.model_listings) == (1, 1)
    assert "judge 'b': backends.judging at" in out
    (t_path,) = (tmp_path / "out" / "logs").glob("*_transcript.json")
    steps = json.loads(t_path.read_text(encoding="utf-8"))["steps"]
    params = {s["path"]: s["params"] for s in steps if s["type"] == "chat"}
    judge_b = next(p for path, p in params.items() if path.endswith("/b"))
    judge_a = next(p for path, p in params.items() if path.endswith("/a"))
    assert (judge_b["backend"], judge_b["model"]) == ("judging", "judge-model")
    assert "backend" not in judge_a and judge_a["model"] == "main-model"


def test_the_offline_flag_takes_every_role_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path,
        backends={"paid": {"provider": "openai", "base_url": "http://192.0.2.1/v1"}},
        image={
            "backend": "paid",
            "generation_path": str(tmp_path / "out" / "images"),
            "log_path": str(tmp_path / "out" / "logs"),
        },
    )
    code = main(["--config", str(config), "--offline", "--prompt-only"], env={}, root=REPO)
    assert code == 0, capsys.readouterr().err
    code = main(["--config", str(config), "--offline", "--seed", "2"], env={}, root=REPO)
    out = capsys.readouterr().out
    assert code == 0
    assert "image: offline preview image (backends.paid.provider is offline)" in out
