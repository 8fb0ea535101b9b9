"""Fake model backends, shipped in the package so that users' tests and ours share them.

* :class:`FunctionTextBackend` — every request goes to a function you write (sync or async);
  return a string, a :class:`TextReply`, or raise.
* :class:`ScriptedTextBackend` — answers from a script. Entries without a matcher are used in
  call order; entries with ``contains=`` / ``when=`` answer the first matching call (use
  matchers for concurrent groups, whose call order is not fixed). A call no entry matches
  raises :class:`UnexpectedCallError`; :meth:`ScriptedTextBackend.assert_all_used` checks
  that nothing in the script was left over.
* :class:`FakeImageBackend` — a real PNG of the requested size, no network.
* :class:`OpenAIServer` — the fake OpenAI-compatible HTTP server on 127.0.0.1, served
  in-process (scripted replies and rules, recorded requests, per-request latencies, rate
  limits through a :class:`RateLimit`, errors and dropped connections to inject), with
  :class:`Reply` and the wire-body helpers (:func:`chat_completion`, :func:`image_response`,
  :func:`error_body`, ...). :func:`offline_chat_completion` /
  :func:`offline_images_response` are the offline backend's answers in the wire format.
* :class:`StrictLocalServer` — that server answering like llama.cpp's ``llama-server`` with a
  strict chat template and a base model: it refuses a conversation that does not alternate
  (HTTP 400), never stops unless the request sends a token limit, lists one model and has no
  image endpoint.

All fakes record every request they received (``.requests``, in arrival order).
"""

from __future__ import annotations

import inspect
import io
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from image_project._fake_openai import (
    HTML_PAGE,
    TINY_PNG,
    WAIT_BOUND_S,
    CallRecord,
    OpenAIServer,
    RateLimit,
    RecordedRequest,
    Reply,
    chat_completion,
    error_body,
    image_response,
    offline_chat_completion,
    offline_images_response,
    truncated,
)
from image_project.backends.base import ImageReply, ImageRequest, TextReply, TextRequest, Usage
from image_project.backends.offline.image import parse_size
from image_project.errors import preview

__all__ = [
    "HTML_PAGE",
    "TINY_PNG",
    "WAIT_BOUND_S",
    "CallRecord",
    "FakeImageBackend",
    "FunctionTextBackend",
    "OpenAIServer",
    "RateLimit",
    "RecordedRequest",
    "Reply",
    "ReplyLike",
    "ScriptEntry",
    "ScriptedTextBackend",
    "StrictLocalServer",
    "StrictRequest",
    "TextFn",
    "UnexpectedCallError",
    "alternation_error",
    "chat_completion",
    "error_body",
    "image_response",
    "last_user_text",
    "offline_chat_completion",
    "offline_images_response",
    "truncated",
]

ReplyLike = str | TextReply | None
TextFn = Callable[[TextRequest], ReplyLike | Awaitable[ReplyLike]]


class UnexpectedCallError(AssertionError):
    """A scripted fake received a call its script has no answer for."""


def last_user_text(request: TextRequest) -> str:
    """The content of the last user message of ``request`` ("" if there is none)."""
    return next((m.content for m in reversed(request.messages) if m.role == "user"), "")


def _to_reply(value: ReplyLike, request: TextRequest, default_model: str) -> TextReply:
    if isinstance(value, TextReply):
        return value
    text = value
    words = len((text or "").split())
    prompt_words = sum(len(m.content.split()) for m in request.messages)
    return TextReply(
        text=text,
        model=request.model or default_model,
        usage=Usage(prompt_words, words, prompt_words + words),
        finish_reason="stop",
    )


class _FakeTextBackend:
    """What the fake text backends share: a label, a default model, the requests seen."""

    def __init__(self, label: str, default_model: str) -> None:
        self._label = label
        self._default_model = default_model
        self.requests: list[TextRequest] = []

    @property
    def label(self) -> str:
        return self._label

    @property
    def default_model(self) -> str:
        return self._default_model


class FunctionTextBackend(_FakeTextBackend):
    """A text backend whose answers come from ``fn(request)``."""

    def __init__(
        self, fn: TextFn, *, label: str = "function", default_model: str = "fake-text-model"
    ) -> None:
        super().__init__(label, default_model)
        self._fn = fn

    async def complete(self, request: TextRequest) -> TextReply:
        self.requests.append(request)
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        return _to_reply(result, request, self._default_model)


@dataclass
class ScriptEntry:
    """One scripted answer: a reply text, a :class:`TextReply`, or an exception to raise.

    ``contains`` matches calls whose last user message contains that text; ``when`` is any
    predicate on the request. With neither, the entry matches any call.
    """

    reply: str | TextReply | BaseException
    contains: str | None = None
    when: Callable[[TextRequest], bool] | None = None
    used: bool = False

    def matches(self, request: TextRequest) -> bool:
        if self.contains is not None and self.contains not in last_user_text(request):
            return False
        return self.when is None or self.when(request)


class ScriptedTextBackend(_FakeTextBackend):
    """A text backend that answers from a script and fails on any call it did not expect."""

    def __init__(
        self,
        script: Sequence[str | TextReply | BaseException | ScriptEntry],
        *,
        label: str = "scripted",
        default_model: str = "scripted-model",
    ) -> None:
        super().__init__(label, default_model)
        self.entries = [s if isinstance(s, ScriptEntry) else ScriptEntry(s) for s in script]

    async def complete(self, request: TextRequest) -> TextReply:
        self.requests.append(request)
        for entry in self.entries:
            if not entry.used and entry.matches(request):
                entry.used = True
                if isinstance(entry.reply, BaseException):
                    raise entry.reply
                return _to_reply(entry.reply, request, self._default_model)
        raise UnexpectedCallError(
            f"unexpected call #{len(self.requests)} to the scripted backend: no unused script "
            f"entry matches the prompt {preview(last_user_text(request))!r}"
        )

    def unused(self) -> list[ScriptEntry]:
        return [e for e in self.entries if not e.used]

    def assert_all_used(self) -> None:
        left = self.unused()
        if left:
            raise AssertionError(
                f"{len(left)} scripted answer(s) were never requested: "
                + "; ".join(preview(str(e.reply), 60) for e in left)
            )


class FakeImageBackend:
    """Returns a real PNG of the requested size (a flat colour), recording each request.

    ``fail_with`` makes every call raise that exception instead.
    """

    def __init__(
        self,
        *,
        color: tuple[int, int, int] = (40, 90, 140),
        fail_with: BaseException | None = None,
        default_model: str = "fake-image-model",
    ) -> None:
        self.color = color
        self.fail_with = fail_with
        self._default_model = default_model
        self.requests: list[ImageRequest] = []

    @property
    def label(self) -> str:
        return "fake-image"

    @property
    def default_model(self) -> str:
        return self._default_model

    async def generate(self, request: ImageRequest) -> ImageReply:
        self.requests.append(request)
        if self.fail_with is not None:
            raise self.fail_with
        width, height = parse_size(request.size)
        buf = io.BytesIO()
        Image.new("RGB", (width, height), self.color).save(buf, format="PNG")
        return ImageReply(data=buf.getvalue(), model=request.model or self._default_model)


def alternation_error(roles: Sequence[str], *, system_role: bool = True) -> str | None:
    """Why a strict chat template refuses a conversation with these message ``roles``, or
    None when it accepts it: one optional leading ``system`` message (none at all with
    ``system_role=False``), then ``user`` / ``assistant`` turns alternating, starting with
    ``user``. The same rule as ``tests/data/templates/strict_alternation.jinja`` (Gemma's and
    Mistral's templates enforce it too)."""
    turns = list(roles)
    if not turns:
        return "strict_alternation: no messages"
    offset = 0
    if turns[0] == "system":
        if not system_role:
            return "System role not supported"
        turns, offset = turns[1:], 1
        if not turns:
            return "strict_alternation: a system message alone, no user turn"
    for i, role in enumerate(turns):
        if role == "system":
            return (
                f"strict_alternation: a system message is allowed only first (message {i + offset})"
            )
        if (role == "user") != (i % 2 == 0):
            return (
                "Conversation roles must alternate user/assistant/user/assistant/... "
                f"(message {i + offset} is {role})"
            )
    return None


StrictRequest = RecordedRequest
"""One request :class:`StrictLocalServer` received, and the status it answered with."""

_FILLER = ("and", "the", "light", "keeps", "going", "on", "and", "on")


class StrictLocalServer(OpenAIServer):
    """The fake OpenAI server answering like ``llama-server`` serving a base model through a
    strict chat template (the harness's ``scripts/real-model-check`` runs the real one).
    Start and stop it in the test: ``with StrictLocalServer() as server:`` and point the
    client at ``server.base_url``.

    * ``POST /v1/chat/completions``: a conversation :func:`alternation_error` refuses gets
      HTTP 400 in llama.cpp's error shape (``{"error": {"code": 400, "message": ...,
      "type": "invalid_request_error"}}``). Otherwise the answer is the offline backend's
      (schema-valid JSON for a ``json_schema`` response format), one token per
      whitespace-separated word. The model never stops by itself: without a token limit
      (``max_completion_tokens`` or ``max_tokens``) the answer runs on with filler words to
      the server's cap of ``cap_tokens`` and ends with ``finish_reason: "length"``; with a
      limit it is cut at the limit (``"length"``) when longer, else ends with ``"stop"``.
    * ``GET /v1/models``: the one model, ``model``.
    * Anything else, ``/v1/images/generations`` included: 404 (``not_found_error``).

    Every request, the model listing included, is recorded in :attr:`requests` with the
    status it got, in arrival order.
    """

    content_type = "application/json; charset=utf-8"
    record_model_listings = True

    def __init__(
        self, *, model: str = "gemma-3-270m", cap_tokens: int = 256, system_role: bool = True
    ) -> None:
        super().__init__(offline=True, models=(model,))
        self.model = model
        self.cap_tokens = cap_tokens
        self.system_role = system_role

    def model_list(self) -> tuple[int, Any]:
        entry = {"id": self.model, "object": "model", "created": 0, "owned_by": "llamacpp"}
        return 200, {"object": "list", "data": [entry]}

    async def default_answer(self, request: RecordedRequest) -> tuple[int, Any]:
        if request.method == "POST" and request.route.endswith("/chat/completions"):
            return await self._chat(request.body)
        return 404, _llama_error(404, "File Not Found", "not_found_error")

    async def _chat(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return 400, _llama_error(400, "'messages' is required", "invalid_request_error")
        roles = [str(m.get("role")) if isinstance(m, dict) else "?" for m in body["messages"]]
        refused = alternation_error(roles, system_role=self.system_role)
        if refused is not None:
            message = (
                "Unable to generate parser for this template. Automatic parser generation "
                f"failed: Jinja Exception: {refused}"
            )
            return 400, _llama_error(400, message, "invalid_request_error")
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            return 400, _llama_error(400, f"invalid token limit {limit!r}", "invalid_request_error")
        reply = await offline_chat_completion(body)
        words = str(reply["choices"][0]["message"]["content"] or "").split()
        budget = min(limit, self.cap_tokens) if limit is not None else self.cap_tokens
        if limit is None:  # a base model does not stop: it runs on to the server's cap
            while len(words) < budget:
                words.extend(_FILLER)
        finish = "length" if limit is None or len(words) > budget else "stop"
        words = words[:budget]
        reply["model"] = self.model
        reply["system_fingerprint"] = "b0-strict-local"
        reply["choices"][0]["message"]["content"] = " ".join(words)
        reply["choices"][0]["finish_reason"] = finish
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        reply["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(words),
            "total_tokens": prompt_tokens + len(words),
        }
        return 200, reply


def _llama_error(code: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": kind}}
