"""The pre-flight probe: every OpenAI-compatible endpoint a run uses, checked before its first
model call.

:func:`probe_backends` asks each endpoint for its model list (``GET {base_url}/models``, the
SDK's ``models.list()``, with the backend's key, no retries and a bounded timeout) and raises
one :class:`~image_project.errors.ConfigError` (exit 2, nothing spent) when:

* the endpoint cannot be reached (connection refused, DNS, timeout), or answers the list
  with a server error; the key is ``<backend>.base_url``;
* it refuses the key (401 / 403); the key is ``<backend>.api_key_env``;
* it lists its models and a role's model is not among them, e.g. a full run whose image
  model a text-only server (llama.cpp, Ollama, vLLM) does not serve; the key is the one that
  chose the model (``image.model``, ``backend.text_model``, ``prompt.scoring.judges[1]
  .model``, ...), and the message names the role, the URL, the models the server listed and
  what to set instead (for the image: ``--set image.backend=offline`` or ``--prompt-only``).

An endpoint that has no model list (404, 405 or 501 for ``/models``) passes: the run finds
out on its first call, as before. The offline backend is never probed, nor is a role the run
does not use (a prompt-only run has no image role). The probe respects the adapter's network
policy (:func:`image_project.backends.openai_backend.set_network_policy`): an endpoint the
policy refuses is not probed (its calls fail with the policy's own error, recorded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from image_project.errors import ConfigError, NetworkDisabledError

__all__ = ["ModelNeed", "ProbeTarget", "probe_backends"]

_NO_LIST = frozenset({404, 405, 501})
_SHOWN_MODELS = 12


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
    serves. ``check_network`` raises when the network policy forbids the endpoint."""

    key: str
    base_url: str
    api_key: str
    api_key_env: str
    timeout_s: float
    needs: tuple[ModelNeed, ...]
    check_network: Callable[[], None] = _allowed


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
        f"among the models it lists ({shown}{more}){hint} (no model call was made)",
    )


async def _listed(target: ProbeTarget) -> list[str] | None:
    """The model ids the endpoint lists; None when it has no model list."""
    # Imported here: only a run with an OpenAI-compatible backend probes.
    import openai

    client = openai.AsyncOpenAI(
        api_key=target.api_key,
        base_url=target.base_url,
        timeout=target.timeout_s,
        max_retries=0,
    )
    try:
        page = await client.models.list()
        return [model.id for model in page.data]
    except openai.APIConnectionError as exc:  # refused, DNS, timeout (APITimeoutError)
        what = "timed out" if isinstance(exc, openai.APITimeoutError) else "failed"
        raise _unreachable(target, f"{what} ({type(exc).__name__}: {exc})") from None
    except openai.APIStatusError as exc:
        status = exc.status_code
        if status in _NO_LIST:
            return None
        if status in (401, 403):
            raise ConfigError(
                f"{target.key}.api_key_env",
                f"{target.base_url} refused the key in ${target.api_key_env} (HTTP {status}) "
                f"when its models were listed; set ${target.api_key_env} to a valid key "
                "(no model call was made)",
            ) from None
        raise _unreachable(target, f"answered HTTP {status}") from None
    except (openai.OpenAIError, ValueError, TypeError, AttributeError) as exc:
        # An answer that is not a model list (HTML from a proxy, another JSON shape): the
        # endpoint exists but lists nothing we can read; the run finds out on its first call.
        del exc
        return None
    finally:
        await client.close()


async def probe_backends(targets: Sequence[ProbeTarget]) -> None:
    """Probe every target in turn (see the module docstring); raise the first problem."""
    for target in targets:
        try:
            target.check_network()
        except NetworkDisabledError:
            continue
        listed = await _listed(target)
        if not listed:
            continue
        for need in target.needs:
            if need.model not in listed:
                raise _missing(target, need, listed)
