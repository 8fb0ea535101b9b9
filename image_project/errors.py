"""The one error tree of image_project.

::

    ImageProjectError                    base of everything we raise on purpose
    ├── ConfigError                      bad configuration; raised at load time, before any
    │                                    model call; carries the full dotted key path (exit 2)
    ├── InputFileError                   a categories / profile / record file that cannot be
    │                                    used (missing, empty, wrong header, not UTF-8), or an
    │                                    output directory that cannot be written; exit 2
    ├── PipelineDefinitionError          a step tree that cannot run (two children with one
    │                                    name, a bad merge mode, an empty name, a bad answer
    │                                    schema); raised when the tree is built or first checked
    ├── StoreError                       the run store could not be opened, read or written;
    │                                    names the store's URL without its password
    ├── ContextInjectorError             a context injector (a plugin's) raised or answered in
    │                                    the wrong shape; names the injector; the run fails
    │                                    in phase ``context``, before any model call
    ├── UpscaleError                     the 4K upscale failed at run time (the upscaler binary
    │                                    exited non-zero, timed out or wrote no image); carries
    │                                    the tails of its output
    ├── RunFailed                        a run failed after it started, its transcript
    │                                    written; carries the record's error (exit 1;
    │                                    defined in ``image_project.run``)
    ├── StepFailedError                  a step could not produce a usable result at run time
    │   ├── EmptyPromptError             a None / non-string / blank prompt (before any call)
    │   ├── PromptTooLongError           a request longer than its bound (before that call)
    │   ├── EmptyResponseError           a None / blank model answer the step does not allow
    │   └── ModelOutputError             the model answered, but not in the required shape
    │       │                            (after the bounded re-asks); carries a short preview
    │       └── RefusalError             the model refused (never re-asked)
    └── BackendError                     transport to a model service failed
        ├── BackendTimeoutError          the configured timeout fired
        ├── BackendConnectionError       could not connect / connection reset
        ├── RateLimitedError             429 after every allowed attempt
        ├── QuotaExceededError           429 saying the account's quota or budget is used up
        │                                (insufficient_quota, billing codes); never retried
        ├── RetryAfterTooLongError       the server asked to wait longer than
        │                                backend.max_retry_wait_s before a retry; fails at once
        ├── ServerError                  5xx after every allowed attempt
        ├── MalformedResponseError       a success status whose body is not the answer (an
        │                                HTML page, truncated JSON, a wrong content type, JSON
        │                                of another shape), after every allowed attempt
        ├── AuthenticationError          401 / 403; names the environment variable to set
        ├── RequestRejectedError         400 / 404 / 422 and other non-retryable 4xx
        └── NetworkDisabledError         the real adapter was asked to touch the network under
                                         the test suite without opting in

Transport retries and "the model answered badly" re-asks are different layers: a
``BackendError`` means every transport attempt failed; a ``ModelOutputError`` means the model
answered every re-ask badly.

Errors raised while a step runs are *located*: the engine attaches the innermost failing
node's path, name and type (see :func:`locate` / :func:`location_of`). Attribution works for
any exception type, not only ours, so a bug in an action function is still blamed on its path.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field
from typing import Literal

NodeType = Literal["chat", "action", "block", "image"]

PREVIEW_CHARS = 200


def preview(text: object, limit: int = PREVIEW_CHARS) -> str:
    """A single-line preview of at most ``limit`` characters, for error messages."""
    s = text if isinstance(text, str) else repr(text)
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


class _ShortRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<an int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT_REPR = _ShortRepr()
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxstring = 80
_SHORT_REPR.maxlong = 80
_SHORT_REPR.maxother = 80


def short_repr(value: object) -> str:
    """A ``repr`` for error messages: at most about 80 characters, whatever ``value`` is
    (long strings and containers are elided, deep or shared nesting is cut, huge ints are
    described instead of printed, which Python refuses beyond 4300 digits). Unlike
    :func:`preview`, spaces are kept as they are (a repr escapes the other whitespace)."""
    shown = _SHORT_REPR.repr(value)
    return shown if len(shown) <= 80 else shown[:79] + "…"


class ImageProjectError(Exception):
    """Base class of every error image_project raises on purpose."""


class ConfigError(ImageProjectError):
    """Invalid configuration. ``key`` is the full dotted path of the offending key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


class InputFileError(ImageProjectError):
    """An input data file cannot be used. ``path`` names it; raised before any model call."""

    def __init__(self, path: object, message: str) -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: {message}")


class PipelineDefinitionError(ImageProjectError):
    """A step tree that cannot run: detected before any model call."""


class StoreError(ImageProjectError):
    """The run store could not be opened, read or written; the message names its URL (never
    the password) and the driver's exception is chained."""


class ContextInjectorError(ImageProjectError):
    """A context injector failed at run time (``image_project.context``). ``injector`` names
    it; plugins are imported and checked earlier, at configuration time (ConfigError)."""

    def __init__(self, injector: str, message: str) -> None:
        self.injector = injector
        super().__init__(f"context injector {injector!r}: {message}")


class UpscaleError(ImageProjectError):
    """The 4K upscale (``upscale.enabled``) failed while the run wrote its records: the
    upscaler binary exited non-zero, timed out or left no readable image, or the image needs
    an upscaler the run does not have. The message names the binary and ends with the tails
    of its output."""


class StepFailedError(ImageProjectError):
    """A step could not produce a usable result."""


class EmptyPromptError(StepFailedError):
    """The prompt was None, not a string, or blank; no model call was made."""


class PromptTooLongError(StepFailedError):
    """A request was longer than the run's bound (``prompt.max_prompt_chars``); that call was
    not made."""


class EmptyResponseError(StepFailedError):
    """The model answered None or a blank string and the step does not allow that."""


class ModelOutputError(StepFailedError):
    """The model's answer did not have the required shape, after the allowed re-asks.

    ``reason`` is a short machine-readable code (for example ``invalid_judge_output``),
    ``detail`` the message without the reason and preview, ``output_preview`` at most 200
    characters of the last bad answer.
    """

    def __init__(self, reason: str, message: str, *, output: object = "") -> None:
        self.reason = reason
        self.detail = message
        self.output = output
        self.output_preview = preview(output)
        detail = f"{reason}: {message}"
        if self.output_preview:
            detail += f" (output preview: {self.output_preview!r})"
        super().__init__(detail)


class RefusalError(ModelOutputError):
    """The model refused to answer. Refusals are never re-asked."""

    def __init__(self, message: str, *, output: object = "") -> None:
        super().__init__("refused", message, output=output)


class BackendError(ImageProjectError):
    """A model service could not be reached or answered with an error.

    ``status`` is the HTTP status when there was one; ``attempts`` how many transport
    attempts were made before giving up; ``pacing_wait_ms`` how long those attempts were held
    before being sent (rate window, concurrency limit), when the adapter paces its calls.
    """

    pacing_wait_ms: float = 0.0

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        self.status = status
        self.attempts = attempts
        super().__init__(message)


class BackendTimeoutError(BackendError):
    """The configured request timeout fired on every attempt."""


class BackendConnectionError(BackendError):
    """The connection failed or was reset on every attempt."""


class RateLimitedError(BackendError):
    """HTTP 429 on every attempt."""


class ServerError(BackendError):
    """HTTP 5xx (or 408 / 409) on every attempt."""


class MalformedResponseError(BackendError):
    """A success status (200) whose body was not a usable answer on every attempt: not JSON
    (an HTML page from a proxy, a truncated body), a content type that is not JSON and a body
    that does not parse, or JSON of another shape. Retried like a 5xx; the message names the
    content type and shows a short preview of the body."""


class QuotaExceededError(BackendError):
    """HTTP 429 whose error code says the account's quota, credit or spend limit is used up
    (``insufficient_quota`` and OpenAI's billing codes). Waiting does not help: never retried."""


class RetryAfterTooLongError(BackendError):
    """The server asked to wait longer than ``backend.max_retry_wait_s`` before a retry, so the
    call failed at once instead of waiting (or retrying early). The message names the wait
    asked for and the setting; the server's own error is the ``__cause__``."""


class AuthenticationError(BackendError):
    """HTTP 401 / 403: the key is missing, wrong, or lacks access. Never retried."""


class RequestRejectedError(BackendError):
    """A non-retryable 4xx (400, 404, 422, ...): the request itself is wrong."""


class NetworkDisabledError(BackendError):
    """The real adapter refused to use the network (under tests, unless a test opts in)."""


@dataclass(frozen=True)
class StepLocation:
    """Where in the step tree an error happened (the innermost failing node)."""

    path: str
    name: str
    node_type: NodeType
    cancelled_paths: tuple[str, ...] = field(default=())


_LOCATION_ATTR = "_image_project_location"
_CANCELLED_ATTR = "_image_project_cancelled_paths"


def locate(exc: BaseException, *, path: str, name: str, node_type: NodeType) -> None:
    """Attach a location to ``exc`` unless an inner node already did (innermost wins)."""
    if getattr(exc, _LOCATION_ATTR, None) is None:
        setattr(exc, _LOCATION_ATTR, (path, name, node_type))


def add_cancelled_paths(exc: BaseException, paths: list[str]) -> None:
    """Record sibling paths that were cancelled because ``exc`` failed."""
    if not paths:
        return
    existing: tuple[str, ...] = getattr(exc, _CANCELLED_ATTR, ())
    setattr(exc, _CANCELLED_ATTR, existing + tuple(p for p in paths if p not in existing))


def cancelled_paths_of(exc: BaseException) -> tuple[str, ...]:
    cancelled: tuple[str, ...] = getattr(exc, _CANCELLED_ATTR, ())
    return cancelled


_REJECTED_ATTR = "_image_project_rejected_answers"


def attach_rejected(exc: BaseException, requests: int, rejected: tuple[object, ...]) -> None:
    """Record on ``exc`` what its failing step went through before it: how many requests
    it sent, and the answers its gates rejected (each with its error), so a failure after
    re-asks keeps them (the run record's ``error.requests`` and ``error.reasks``)."""
    if getattr(exc, _REJECTED_ATTR, None) is None:
        setattr(exc, _REJECTED_ATTR, (requests, rejected))


def rejected_of(exc: BaseException) -> tuple[int, tuple[object, ...]] | None:
    """``(requests, rejected answers)`` attached by :func:`attach_rejected`, if any."""
    raw: tuple[int, tuple[object, ...]] | None = getattr(exc, _REJECTED_ATTR, None)
    return raw


def location_of(exc: BaseException) -> StepLocation | None:
    """The location the engine attached to ``exc``, if any."""
    raw = getattr(exc, _LOCATION_ATTR, None)
    if raw is None:
        return None
    path, name, node_type = raw
    return StepLocation(path, name, node_type, cancelled_paths_of(exc))
