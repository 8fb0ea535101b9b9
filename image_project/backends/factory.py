"""Choose and build the text and image backends from the configuration.

``backend.provider``:

* ``offline`` — the built-in offline backend: no network, deterministic answers.
* ``openai`` — the OpenAI adapter (api.openai.com, or ``backend.base_url`` for an
  OpenAI-compatible server such as Ollama, vLLM or LM Studio). The key is read from the
  environment variable named by ``backend.api_key_env``; a local server that needs no key
  gets a placeholder.
* ``auto`` — ``openai`` when that environment variable is set or ``base_url`` points at a
  server, else ``offline``.

For the OpenAI-compatible provider the configured models are checked against the model
capability tables (:func:`image_project.config.capabilities.check_models`) before anything is
built: a shut-down model, a temperature a model cannot honour, an image size or quality the
image model would reject is a :class:`~image_project.errors.ConfigError` (exit 2) naming the
key and the allowed values. The offline backend serves every request itself and needs no
such check.

Backends per role: the main ``backend:`` serves the prompt pipeline (text); the image, the
judges and the LLM selector may each name another (``image.backend``,
``prompt.scoring.judge_backend``, ``prompt.scoring.judges[i].backend``,
``prompt.scoring.evolution.selector_backend``): ``offline`` (the built-in offline backend) or
a section of ``backends:``, which has the fields of ``backend:``. Only the roles a run uses
are built (the image only for a full run, judges only with scoring on, the selector only
with ``selector: llm``); each backend once, with its own transport (client, pacer, retries),
shared by the roles that name it. Text requests reach theirs through a
:class:`~image_project.backends.routing.RoutingTextBackend` (``TextRequest.backend``).

:attr:`Backends.description` is the one line the CLI prints so that a user always knows
which backend produced a run, and which backend serves which role.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from image_project.backends.base import ImageBackend, TextBackend
from image_project.backends.offline.image import OfflineImageBackend
from image_project.backends.offline.text import OfflineTextBackend
from image_project.backends.pacing import Pacer
from image_project.backends.probe import ModelNeed, ProbeTarget, probe_backends
from image_project.backends.retry import RetryPolicy
from image_project.backends.routing import RoutingTextBackend
from image_project.config.capabilities import check_models
from image_project.config.models import OFFLINE_BACKEND, AppConfig, BackendConfig
from image_project.errors import AuthenticationError
from image_project.record.run import PreflightMode, PreflightRecord

if TYPE_CHECKING:
    from image_project.backends.openai_backend import OpenAIBackends

PLACEHOLDER_KEY = "unused-by-local-server"
PROBE_TIMEOUT_S = 10.0
"""The longest the pre-flight probe waits for one endpoint's model list (or its backend's
``timeout_s`` when shorter)."""


async def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Backends:
    """The backends a run uses. Their ``default_model`` is the model a run asks for:
    ``text.default_model`` for every text step (and judges without a model of their own),
    ``image.default_model`` for the image (the offline backend's own names when offline)."""

    text: TextBackend
    image: ImageBackend
    provider: Literal["openai", "offline"]
    description: str
    aclose: Callable[[], Awaitable[None]] = _nothing
    # The rate-limit pacer of the main backend's transport (None: the offline backend); a
    # batch reads its budget (run.parallel: auto).
    pacer: Pacer | None = None
    text_models: Mapping[str, str] = field(default_factory=dict)
    """The default text model of every other backend a run uses, by the name its roles
    refer to it by (``offline`` or a name in ``backends:``): a judge or selector on that
    backend without a model of its own asks for it."""
    probes: tuple[ProbeTarget, ...] = ()
    """The OpenAI-compatible endpoints a run uses and the models each must serve, for the
    pre-flight probe (:func:`image_project.backends.probe.probe_backends`)."""

    preflight: tuple[PreflightRecord, ...] = ()
    """What the pre-flight probe did (:meth:`probe`), for each run's transcript."""

    async def probe(self) -> tuple[PreflightRecord, ...]:
        """The pre-flight probe of :attr:`probes` (:mod:`image_project.backends.probe`),
        before the first model call, and what it did (give it to :attr:`preflight` with
        :func:`dataclasses.replace`); on failure the backends are closed and the
        :class:`~image_project.errors.ConfigError` propagates (exit 2)."""
        if not self.probes:
            return ()
        try:
            return await probe_backends(self.probes)
        except BaseException:
            await self.aclose()
            raise


@dataclass(frozen=True)
class ProviderChoice:
    """Which provider a run uses and why; ``api_key`` is the key to send (the placeholder for
    a local server that needs none; None offline)."""

    provider: Literal["openai", "offline"]
    api_key: str | None
    why: str
    key_set: bool = False


def choose_provider(
    b: BackendConfig, env: Mapping[str, str], key: str = "backend"
) -> ProviderChoice:
    """The one place that decides the provider and checks the API key.

    ``auto`` means openai when ``env[api_key_env]`` is set and non-empty or ``base_url``
    points at a server (local OpenAI-compatible servers need no key), else offline. An
    explicit ``openai`` without either raises
    :class:`~image_project.errors.AuthenticationError` naming the environment variable.
    ``key`` is the section's dotted key in messages (``backends.local`` for a named one).
    """
    api_key = env.get(b.api_key_env, "").strip()
    if b.provider == "offline":
        unused = f"; ${b.api_key_env} is set but not used" if api_key else ""
        why = f"{key}.provider is offline{unused}"
        return ProviderChoice("offline", None, why, bool(api_key))
    if not api_key and not b.base_url:
        if b.provider == "auto":
            why = f"no API key in ${b.api_key_env} and no {key}.base_url"
            return ProviderChoice("offline", None, why)
        raise AuthenticationError(
            f"{key}.provider is openai but the environment variable {b.api_key_env} is not "
            f"set. Set {b.api_key_env} to your API key, point {key}.base_url at an "
            f"OpenAI-compatible server, or use {key}.provider: offline.",
            attempts=0,
        )
    why = f"${b.api_key_env} is set" if api_key else f"{key}.base_url is {b.base_url}"
    return ProviderChoice("openai", api_key or PLACEHOLDER_KEY, why, bool(api_key))


@dataclass
class _Built:
    """One backend of a run, built once: its text and image backends (the offline ones, or
    an OpenAI pair over one transport) and how to name it."""

    key: str  # "backend", "backends.<name>" or "offline"
    text: TextBackend
    image: ImageBackend
    where: str  # "offline" or the server
    pair: OpenAIBackends | None = None
    choice: ProviderChoice | None = None
    config: BackendConfig | None = None


def _roles(cfg: AppConfig) -> list[tuple[str, str | None]]:
    """``(role, backend reference)`` of every role the run uses, the main text first."""
    roles: list[tuple[str, str | None]] = [("text", None)]
    if cfg.run.mode == "full":
        roles.append(("image", cfg.image.backend))
    scoring = cfg.prompt.scoring
    if not scoring.enabled:
        return roles
    roles += [(f"judge {j.id!r}", j.backend) for j in scoring.effective_judges("")]
    evolution = scoring.evolution
    if evolution.enabled and evolution.selector == "llm":
        roles.append(("the LLM selector", scoring.selector_backend))
    return roles


def _build(cfg: AppConfig, ref: str | None, env: Mapping[str, str]) -> _Built:
    if ref == OFFLINE_BACKEND:
        return _Built(OFFLINE_BACKEND, OfflineTextBackend(), OfflineImageBackend(), "offline")
    b = cfg.backend_config(ref)
    assert b is not None
    key = "backend" if ref is None else f"backends.{ref}"
    choice = choose_provider(b, env, key)
    if choice.api_key is None:
        built = _Built(key, OfflineTextBackend(), OfflineImageBackend(), "offline")
        built.choice, built.config = choice, b
        return built
    # Imported here, not at the top: ``openai`` takes most of the CLI's start-up, and an
    # offline run or ``--help`` never uses it (tests/test_startup.py).
    from image_project.backends.openai_backend import openai_backends
    from image_project.backends.wire import WireOptions

    retry = RetryPolicy(
        max_attempts=b.max_attempts,
        initial_wait_s=b.backoff_initial_s,
        max_wait_s=b.backoff_max_s,
        max_retry_wait_s=b.max_retry_wait_s,
    )
    pair = openai_backends(
        api_key=choice.api_key,
        api_key_env=b.api_key_env,
        text_model=b.text_model,
        image_model=cfg.image.model,
        base_url=b.base_url,
        timeout_s=b.timeout_s,
        retry=retry,
        max_concurrency=b.max_concurrency,
        structured_outputs=b.structured_outputs,
        wire=WireOptions(
            structured_outputs=b.structured_outputs,
            role_style=b.role_style,
            schema_dialect=b.schema_dialect,
            token_limit_param=b.token_limit_param,
        ),
    )
    where = b.base_url or "api.openai.com"
    return _Built(key, pair.text, pair.image, where, pair, choice, b)


def make_backends(cfg: AppConfig, env: Mapping[str, str]) -> Backends:
    """Build the backends of every role the run uses (no network is touched here); see
    :func:`choose_provider` and the module docstring.

    Raises :class:`~image_project.errors.ConfigError` when an OpenAI-compatible backend is
    chosen and a model it serves would reject its settings (see the module docstring), and
    :class:`~image_project.errors.AuthenticationError` when a backend a role uses needs a key
    that is not set.
    """
    roles = _roles(cfg)
    built: dict[str | None, _Built] = {}
    for _, ref in roles:
        if ref not in built:
            built[ref] = _build(cfg, ref, env)
    main = built[None]
    served = {ref for ref, one in built.items() if one.pair is not None}
    if served:
        check_models(cfg, openai_refs=served)
    routed = [ref for role, ref in roles if role != "image" and ref is not None]
    text_models = {ref: built[ref].text.default_model for ref in routed}
    routes = {ref: built[ref].text for ref in routed}
    text: TextBackend = RoutingTextBackend(main.text, routes) if routes else main.text
    image_ref = cfg.image.backend if cfg.run.mode == "full" else None
    uses = _uses(cfg, roles, text_models, main.text.default_model)

    async def aclose() -> None:
        for one in built.values():
            if one.pair is not None:
                await one.pair.aclose()

    return Backends(
        text=text,
        image=built[image_ref].image,
        provider="openai" if main.pair is not None else "offline",
        description=_describe(cfg, main, built, uses),
        aclose=aclose,
        text_models=text_models,
        probes=_probes(built, uses),
        pacer=main.pair.transport.pacer if main.pair is not None else None,
    )


def _text_key(ref: str | None) -> str:
    return "backend.text_model" if ref is None else f"backends.{ref}.text_model"


def _uses(
    cfg: AppConfig,
    roles: list[tuple[str, str | None]],
    text_models: Mapping[str, str],
    main_model: str,
) -> list[tuple[ModelNeed, str | None]]:
    """Every role with the model it asks for, the key that chose it, and its backend
    reference (the same fallbacks as the run's: ``effective_judges``)."""
    scoring = cfg.prompt.scoring
    judges = iter(scoring.effective_judges(main_model, text_models) if scoring.enabled else ())
    out: list[tuple[ModelNeed, str | None]] = []
    for role, ref in roles:
        if role == "text":
            need = ModelNeed(role, "backend.text_model", main_model)
        elif role == "image":
            need = ModelNeed(role, "image.model", cfg.image.model)
        elif role.startswith("judge "):
            judge = next(judges)
            need = ModelNeed(role, _judge_key(cfg, judge.id, ref), judge.model)
        else:
            model = scoring.effective_selector_model(main_model, text_models)
            key = (
                "prompt.scoring.evolution.selector_model"
                if scoring.evolution.selector_model is not None
                else "prompt.scoring.judge_model"
                if scoring.judge_model is not None
                else _text_key(ref)
            )
            need = ModelNeed(role, key, model)
        out.append((need, ref))
    return out


def _judge_key(cfg: AppConfig, judge_id: str, ref: str | None) -> str:
    scoring = cfg.prompt.scoring
    for index, judge in enumerate(scoring.judges or ()):
        if judge.id == judge_id and judge.model is not None:
            return f"prompt.scoring.judges[{index}].model"
    return "prompt.scoring.judge_model" if scoring.judge_model is not None else _text_key(ref)


def _describe(
    cfg: AppConfig,
    main: _Built,
    built: Mapping[str | None, _Built],
    uses: list[tuple[ModelNeed, str | None]],
) -> str:
    """The line the CLI prints: the main backend as before, then (when any role uses
    another backend) which backend serves each such role; the other roles are "the rest"."""
    b = cfg.backend
    if main.pair is None:
        assert main.choice is not None
        hint = "" if main.choice.key_set else f" Set ${b.api_key_env} for real models."
        line = (
            f"Using the built-in OFFLINE backend ({main.choice.why}): deterministic placeholder "
            f"text and a drawn preview image, no network.{hint}"
        )
    else:
        if not any(need.role == "image" for need, _ in uses):
            image = "none (prompt only)"
        elif cfg.image.backend is None:
            image = cfg.image.model
        else:
            image = "see below"
        line = (
            f"Using OpenAI-compatible backend at {main.where} (text model {b.text_model}, "
            f"image model {image}, up to {b.max_concurrency} calls in flight)."
        )
    if all(ref is None for _, ref in uses):
        return line
    parts = []
    for need, ref in uses:
        if ref is None:
            continue  # the main backend's roles: "the rest" below
        one = built[ref]
        if one.pair is not None:
            parts.append(f"{need.role}: {one.key} at {one.where} (model {need.model})")
            continue
        label = "offline preview image" if need.role == "image" else "offline"
        why = "" if one.choice is None else f" ({one.choice.why})"
        parts.append(f"{need.role}: {label}{why}")
    rest = "; the rest: the main backend" if any(ref is None for _, ref in uses) else ""
    return f"{line} Roles: " + "; ".join(parts) + rest + "."


def preflight_mode(b: BackendConfig) -> PreflightMode:
    """A backend's ``preflight`` with ``auto`` resolved: ``strict`` for api.openai.com and a
    server on this machine (loopback: llama.cpp, Ollama, vLLM list what they serve), ``warn``
    for any other server (a proxy or another provider's list may not name what it serves)."""
    if b.preflight != "auto":
        return b.preflight
    if b.base_url is None:
        return "strict"
    host = (urllib.parse.urlsplit(b.base_url).hostname or "").lower()
    if host in ("api.openai.com", "localhost", "::1") or host.startswith("127."):
        return "strict"
    return "warn"


def _probes(
    built: Mapping[str | None, _Built], uses: list[tuple[ModelNeed, str | None]]
) -> tuple[ProbeTarget, ...]:
    out = []
    for ref, one in built.items():
        if one.pair is None or one.choice is None or one.config is None:
            continue
        needs = tuple(need for need, r in uses if r == ref)
        out.append(
            ProbeTarget(
                key=one.key,
                base_url=one.pair.transport.base_url,
                api_key=one.choice.api_key or PLACEHOLDER_KEY,
                api_key_env=one.config.api_key_env,
                timeout_s=min(one.config.timeout_s, PROBE_TIMEOUT_S),
                needs=needs,
                check_network=one.pair.transport.check_network,
                retry=one.pair.transport.retry_policy,
                mode=preflight_mode(one.config),
            )
        )
    return tuple(out)
