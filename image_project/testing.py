"""Fake model backends, shipped in the package so that users' tests and ours share them.

* :class:`FunctionTextBackend` — every request goes to a function you write (sync or async);
  return a string, a :class:`TextReply`, or raise.
* :class:`ScriptedTextBackend` — answers from a script. Entries without a matcher are used in
  call order; entries with ``contains=`` / ``when=`` answer the first matching call (use
  matchers for concurrent groups, whose call order is not fixed). A call no entry matches
  raises :class:`UnexpectedCallError`; :meth:`ScriptedTextBackend.assert_all_used` checks
  that nothing in the script was left over.
* :class:`FakeImageBackend` — a real PNG of the requested size, no network.
* :func:`offline_chat_completion` / :func:`offline_images_response` — the offline backend's
  answers in the OpenAI wire format, for local OpenAI-compatible test servers (the benchmark's
  latency simulator and the tests' scripted server serve them).

All fakes record every request they received (``.requests``, in arrival order).
"""

from __future__ import annotations

import base64
import functools
import inspect
import io
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from image_project.backends.base import (
    ImageReply,
    ImageRequest,
    JsonSchema,
    Message,
    TextReply,
    TextRequest,
    Usage,
)
from image_project.backends.offline import OfflineTextBackend, parse_size
from image_project.errors import preview

__all__ = [
    "FakeImageBackend",
    "FunctionTextBackend",
    "ReplyLike",
    "ScriptEntry",
    "ScriptedTextBackend",
    "TextFn",
    "UnexpectedCallError",
    "last_user_text",
    "offline_chat_completion",
    "offline_images_response",
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


_OFFLINE_TEXT = OfflineTextBackend()


async def offline_chat_completion(
    payload: Mapping[str, Any], *, model_error: float | None = None
) -> dict[str, Any]:
    """A ``chat.completion`` body answering the request body ``payload`` with the offline
    backend's deterministic text; a strict ``json_schema`` response format gets
    schema-valid JSON. ``model_error``: the offline judges' shared per-model error
    (``OfflineTextBackend(model_error=...)``; None = its default)."""
    fmt = payload.get("response_format") or {}
    schema = None
    if fmt.get("type") == "json_schema":
        spec = fmt["json_schema"]
        schema = JsonSchema(spec["name"], spec["schema"], bool(spec.get("strict", True)))
    backend = _OFFLINE_TEXT if model_error is None else OfflineTextBackend(model_error=model_error)
    reply = await backend.complete(
        TextRequest(
            messages=tuple(Message(m["role"], m["content"]) for m in payload["messages"]),
            temperature=float(payload.get("temperature", 1.0)),
            model=payload.get("model"),
            seed=payload.get("seed"),
            json_schema=schema,
        )
    )
    usage = reply.usage or Usage()
    return {
        "id": "chatcmpl-offline",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": payload.get("model", "offline"),
        "system_fingerprint": "fp_offline",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


def offline_images_response(payload: Mapping[str, Any]) -> dict[str, Any]:
    """An ``images.generate`` body: a base64 PNG gradient of the requested size."""
    return {
        "created": int(time.time()),
        "data": [{"b64_json": _gradient_png_b64(parse_size(str(payload.get("size") or "auto")))}],
        "output_format": "png",
    }


@functools.lru_cache(maxsize=8)
def _gradient_png_b64(size: tuple[int, int]) -> str:
    buf = io.BytesIO()
    Image.linear_gradient("L").resize(size).convert("RGB").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")
