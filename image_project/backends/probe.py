"""The pre-flight probe: every OpenAI-compatible endpoint a run uses, checked before its first
model call.

:func:`probe_backends` asks each endpoint for its model list (``GET {base_url}/models``, the
SDK's ``models.list()``, with the backend's key and a bounded timeout). A failure that may
pass (429, 408, 409, any 5xx, a timeout, a connection cut after it was made) is retried
with the backend's own transport retry policy (:mod:`image_project.backends.retry`: the
same attempts, jittered waits and ``Retry-After`` handling as a model call); then it
raises one :class:`~image_project.errors.ConfigError` (exit 2, nothing spent) when:

* the endpoint cannot be reached (connection refused or an unknown host: at once, since
  waiting does not start a server), or still times out or answers the list with a server
  error or a rate limit after the retries; the key is ``<backend>.base_url`` and the
  message names the last status and the attempts made;
* it refuses the key (401 / 403); the key is ``<backend>.api_key_env``;
* it lists its models and a role's model is not among them (``strict`` only), e.g. a full
  run whose image model a text-only server (llama.cpp, Ollama, vLLM) does not serve; the key
  is the one that chose the model (``image.model``, ``backend.text_model``,
  ``prompt.scoring.judges[1].model``, ...), and the message names the role, the URL, the
  models the server listed and what to set instead (for the image: ``--set
  image.backend=offline`` or ``--prompt-only``).

A listed id matches with or without a ``models/`` prefix (Gemini's OpenAI-compatible
endpoint lists ``models/gemini-...`` and accepts ``gemini-...``). Each endpoint's
``preflight`` setting decides what a missing model does: ``strict`` fails as above, ``warn``
logs a WARNING and lets the run find out on its first call (a list that is not
authoritative: Azure lists models, not deployments; a proxy answers any name), ``off`` does
not ask at all. An endpoint that has no model list (404, 405 or 501 for ``/models``) passes.
The offline backend is never probed, nor is a role the run does not use (a prompt-only run
has no image role). The probe respects the adapter's network policy
(:func:`image_project.backends.openai_backend.set_network_policy`): an endpoint the policy
refuses is not probed (its calls fail with the policy's own error, recorded). What each
probe did is returned as :class:`~image_project.record.run.PreflightRecord` rows, which the
run writes into its transcript (``backend.preflight``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    import openai

from image_project.backends.retry import (
    Retrier,
    RetryPolicy,
    SleepFn,
    attach_retry_after,
    is_retryable_status,
    parse_retry_after,
    retry_after_of,
)
from image_project.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    ConfigError,
    NetworkDisabledError,
    RateLimitedError,
    RetryAfterTooLongError,
    ServerError,
)
from image_project.record.run import PreflightMode, PreflightRecord

log = logging.getLogger(__name__)

_NO_LIST = frozenset({404, 405, 501})
_SHOWN_MODELS = 12
_PREFIX = "models/"

_sleep: SleepFn = anyio.sleep
"""The wait between attempts (tests record it instead of sleeping)."""


@dataclass(frozen=True)
class ModelNeed:
    """A role of the run and the model it asks for: ``role`` as the user reads it (``text``,
    ``image``, ``judge 'a'``, ``the LLM selector``), ``key`` the config key that chose the
    model."""

    role: str
    key: str
    model: str


def _allowed() -> None:
    return None


@dataclass(frozen=True)
class ProbeTarget:
    """One endpoint to probe: ``key`` is its config section (``backend`` or
    ``backends.<name>``), ``base_url`` the URL its client uses, ``needs`` the roles it
    serves, ``retry`` its transport retry policy, ``mode`` its ``preflight`` setting.
    ``check_network`` raises when the network policy forbids the endpoint."""

    key: str
    base_url: str
    api_key: str
    api_key_env: str
    timeout_s: float
    needs: tuple[ModelNeed, ...]
    check_network: Callable[[], None] = _allowed
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    mode: PreflightMode = "strict"


def _models_url(target: ProbeTarget) -> str:
    return target.base_url.rstrip("/") + "/models"


def _unreachable(target: ProbeTarget, why: str) -> ConfigError:
    roles = ", ".join(need.role for need in target.needs)
    return ConfigError(
        f"{target.key}.base_url",
        f"the endpoint for {roles} cannot be used: GET {_models_url(target)} {why}. Start the "
        f"server or fix {target.key}.base_url (no model call was made)",
    )


def _missing(target: ProbeTarget, need: ModelNeed, listed: Sequence[str]) -> ConfigError:
    shown = ", ".join(repr(m) for m in listed[:_SHOWN_MODELS])
    more = f" and {len(listed) - _SHOWN_MODELS} more" if len(listed) > _SHOWN_MODELS else ""
    if need.role == "image":
        hint = (
            "; it serves no such image model (a text-only server?): give the image its own "
            "backend (image.backend: a name under backends:), or use the offline preview "
            "image (--set image.backend=offline), or stop at the prompt (--prompt-only)"
        )
    else:
        hint = f"; set {need.key} to one of them"
    return ConfigError(
        need.key,
        f"{need.role} asks {target.key} at {target.base_url} for {need.model!r}, which is not "
        f"among the models it lists ({shown}{more}){hint}; if this endpoint's list is not "
        f"authoritative, set {target.key}.preflight: warn (no model call was made)",
    )


def _served(model: str, listed: Sequence[str]) -> bool:
    """Whether ``model`` is among ``listed``, either side with or without ``models/``."""
    bare = {m.removeprefix(_PREFIX) for m in listed}
    return model.removeprefix(_PREFIX) in bare


def _status_error(target: ProbeTarget, exc: openai.APIStatusError) -> BackendError:
    """A status worth retrying as our error (its ``Retry-After`` attached); any other status
    raises the :class:`ConfigError` at once."""
    status = exc.status_code
    if status in (401, 403):
        raise ConfigError(
            f"{target.key}.api_key_env",
            f"{target.base_url} refused the key in ${target.api_key_env} (HTTP {status}) "
            f"when its models were listed; set ${target.api_key_env} to a valid key (no "
            "model call was made)",
        ) from None
    if not is_retryable_status(status):
        raise _unreachable(target, f"answered HTTP {status}") from None
    said = f"GET {_models_url(target)} answered HTTP {status}"
    err: BackendError
    if status == 429:
        err = RateLimitedError(said, status=status)
    else:
        err = ServerError(said, status=status)
    attach_retry_after(err, parse_retry_after(exc.response.headers))
    return err


def _not_there(exc: BaseException) -> bool:
    """Whether a connection error means nothing is listening there (refused, unknown host):
    the HTTP client's ``ConnectError`` in the cause chain (matched by name: the SDK's
    transport package is not ours to import), as opposed to a connection cut after it was
    made."""
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "ConnectError":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _why(exc: BackendError) -> str:
    if isinstance(exc, BackendTimeoutError):
        return "timed out"
    if isinstance(exc, BackendConnectionError):
        return "connection cut"
    wait = retry_after_of(exc)
    text = f"HTTP {exc.status}"
    return text if wait is None else f"{text} (Retry-After {wait:g} s)"


@dataclass
class _Tally:
    attempts: int = 0
    failures: list[str] = field(default_factory=list)


async def _listed(target: ProbeTarget, tally: _Tally) -> list[str] | None:
    """The model ids the endpoint lists; None when it has no model list."""
    # Imported here: only a run with an OpenAI-compatible backend probes.
    import openai

    client = openai.AsyncOpenAI(
        api_key=target.api_key,
        base_url=target.base_url,
        timeout=target.timeout_s,
        max_retries=0,
    )

    async def attempt(number: int) -> list[str] | None:
        tally.attempts = number
        try:
            page = await client.models.list()
            return [model.id for model in page.data]
        except openai.APITimeoutError as exc:
            failure: BackendError = BackendTimeoutError(f"timed out ({exc})")
        except openai.APIConnectionError as exc:
            if _not_there(exc):
                # Refused or no such host: the server is not there (not started, a typo),
                # which waiting does not cure; said at once.
                raise _unreachable(target, f"failed ({type(exc).__name__}: {exc})") from None
            # Connected, then cut off (a reset, a closed connection): retried.
            failure = BackendConnectionError(f"the connection was cut ({exc})")
        except openai.APIStatusError as exc:
            if exc.status_code in _NO_LIST:
                return None
            failure = _status_error(target, exc)
        except (openai.OpenAIError, ValueError, TypeError, AttributeError) as exc:
            # An answer that is not a model list (HTML from a proxy, another JSON shape): the
            # endpoint exists but lists nothing we can read; the run finds out on its first
            # call.
            del exc
            return None
        tally.failures.append(_why(failure))
        raise failure

    retrier = Retrier(target.retry, sleep=_sleep)
    try:
        return (await retrier.call(attempt, what=f"pre-flight GET {_models_url(target)}")).value
    except RetryAfterTooLongError:
        raise _unreachable(
            target,
            f"answered {tally.failures[-1]}, a longer wait than {target.key}.max_retry_wait_s "
            f"({target.retry.max_retry_wait_s:g} s), on attempt {tally.attempts}",
        ) from None
    except BackendError:
        raise _unreachable(
            target,
            f"{'answered ' if tally.failures[-1].startswith('HTTP') else ''}"
            f"{tally.failures[-1]} on each of {tally.attempts} attempts (retried as model "
            "calls are)",
        ) from None
    finally:
        await client.close()


async def probe_backends(targets: Sequence[ProbeTarget]) -> tuple[PreflightRecord, ...]:
    """Probe every target in turn (see the module docstring); raise the first problem, else
    return what each probe did."""
    records: list[PreflightRecord] = []
    for target in targets:
        url = _models_url(target)
        if target.mode == "off":
            records.append(PreflightRecord(key=target.key, url=url, mode="off", outcome="off"))
            continue
        try:
            target.check_network()
        except NetworkDisabledError:
            records.append(
                PreflightRecord(key=target.key, url=url, mode=target.mode, outcome="not_probed")
            )
            continue
        tally = _Tally()
        listed = await _listed(target, tally)
        warnings: list[str] = []
        for need in target.needs if listed else ():
            assert listed is not None
            if _served(need.model, listed):
                continue
            problem = _missing(target, need, listed)
            if target.mode == "strict":
                raise problem
            warnings.append(str(problem))
            log.warning("pre-flight (%s.preflight: warn): %s", target.key, problem)
        records.append(
            PreflightRecord(
                key=target.key,
                url=url,
                mode=target.mode,
                outcome="listed" if listed else "no_list",
                attempts=tally.attempts,
                retried=tuple(tally.failures[: max(tally.attempts - 1, 0)]),
                warnings=tuple(warnings),
            )
        )
    return tuple(records)
