"""The model calls of a run, read from its record: what ``image-project runs show --calls``
lists, ``--call PATH`` prints and the review site's run page shows (one reading, two
renderings, so the terminal and the page cannot disagree).

:func:`run_calls` gives every chat step and the image call in the record's declared order,
then the call that failed the run (it has no step: the run's ``error`` keeps its requests
and the answers its gates rejected) and the calls an interrupt cut off (the run's
``error.cancelled_paths``: only their paths are known). A judge's call carries what its
judge's record says of it (:class:`JudgeView`): the protocol, the judge's status, a
``reasoned`` judge's rationale for each card the call showed, a ``pairwise`` call's choice.
Nothing is recomputed, and every text is the record's as it is: escaping it is the
renderer's job (HTML for the site, control characters for the terminal)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from image_project.record.events import ChatEvent, ImageEvent, Reask, StepError
from image_project.record.run import RunError, RunRecord
from image_project.record.scoring import JudgeResult, JudgeStatus, ScoringRecord

CallKind = Literal["chat", "image", "failed", "cut_off"]
CallOutcome = Literal["ok", "reasked", "error", "failed", "cut_off"]
"""How a call ended: ``reasked`` = ok after re-asks; ``error`` = the call failed and the run
went on (a recoverable step: a judge, the LLM selector) or the image call failed;
``failed`` = it failed the run; ``cut_off`` = an interrupt cut it off."""

CALL_COLUMNS: tuple[str, ...] = (
    "path",
    "role",
    "model",
    "protocol",
    "tokens",
    "latency",
    "attempts",
    "status",
)
"""The columns of the calls list, in order (:func:`call_cells` fills them)."""


@dataclass(frozen=True)
class Message:
    """One message of a request as the step recorded it: ``system`` or ``user``."""

    role: str
    text: str


@dataclass(frozen=True)
class JudgeView:
    """What a judge's record says of one of its calls. ``rationales`` are ``(card,
    rationale)`` for the cards the call showed (a ``reasoned`` judge); ``choice`` is
    ``(shown first, shown second, winner)`` (a ``pairwise`` call that answered); ``status``,
    ``warning`` and ``error`` are the judge's, over all its calls."""

    judge_id: str
    protocol: str
    status: JudgeStatus
    rationales: tuple[tuple[str, str], ...] = ()
    choice: tuple[str, str, str] | None = None
    warning: str | None = None
    error: str | None = None

    @property
    def head(self) -> str:
        return f"Judge {self.judge_id} ({self.protocol}): status {self.status}"


@dataclass(frozen=True)
class Call:
    """One model call. ``messages`` are the request's messages the record keeps (the step's
    own system prompt, its user prompt; the image prompt); ``earlier`` counts the messages
    of the run's conversation sent before them, which the step does not repeat (they are
    earlier steps' prompts and answers). ``answer`` is the last answer (the rejected one,
    bounded, for a call that failed: ``answer_chars`` is then its full length), ``reasks``
    every rejected answer (bounded), each with the reason its re-ask gave (a call that
    failed on a bad answer has its last one both here and as ``answer``). ``facts`` are
    ``(label, text)`` lines: the model and sampling, tokens, timing, wire notes, the
    error."""

    kind: CallKind
    path: str
    role: str
    model: str | None
    tokens: int | None
    latency_ms: float | None
    attempts: int | None
    outcome: CallOutcome
    status: str
    messages: tuple[Message, ...] = ()
    earlier: int = 0
    answer: str | None = None
    answer_chars: int | None = None
    reasks: tuple[Reask, ...] = ()
    judge: JudgeView | None = None
    facts: tuple[tuple[str, str], ...] = ()

    @property
    def protocol(self) -> str | None:
        return self.judge.protocol if self.judge is not None else None

    @property
    def earlier_note(self) -> str:
        """What was sent before the user message that the step does not keep ("" when
        nothing was)."""
        if not self.earlier:
            return ""
        many = "messages" if self.earlier != 1 else "message"
        return (
            f"{self.earlier} earlier {many} of the run's conversation came first: earlier "
            "steps' prompts and answers, not repeated with this step"
        )

    @property
    def answer_head(self) -> str:
        """The heading of :attr:`answer`: ``Answer``, or what was kept of a rejected one."""
        if self.answer is None or self.answer_chars is None:
            return "Answer"
        return f"Answer, rejected ({kept_text(self.answer, self.answer_chars)})"


def kept_text(text: str, chars: int | None) -> str:
    """What a record kept of an answer it bounds: ``1,234 characters`` (all of it), or
    ``the first 2,000 of 5,123 characters``."""
    if chars is None or len(text) >= chars:
        return f"{len(text):,} character{'s' if len(text) != 1 else ''}"
    return f"the first {len(text):,} of {chars:,} characters"


def reask_head(n: int, reask: Reask, total: int) -> str:
    """The heading of a call's ``n``-th rejected answer of ``total``, with the reason its
    re-ask gave."""
    return f"Rejected answer {n} of {total}: {reask.error}"


def reask_note(reask: Reask) -> str:
    """What a re-ask kept of the answer it rejected, its hash, and the sampling the next
    request was sent with when it had its own."""
    note = f"{kept_text(reask.response, reask.response_chars)}, sha256 {reask.response_sha256[:12]}"
    own = []
    if reask.temperature is not None:
        own.append(f"temperature {reask.temperature:g}")
    if reask.seed is not None:
        own.append(f"seed {reask.seed}")
    return note + (f"; re-asked with {', '.join(own)}" if own else "")


def choice_text(choice: tuple[str, str, str]) -> str:
    """A pairwise call's outcome: ``shown E then F; F won``."""
    first, second, winner = choice
    return f"shown {first} then {second}; {winner} won"


def run_calls(record: RunRecord) -> tuple[Call, ...]:
    """Every model call of ``record`` (see the module docstring), in declared order."""
    judges = _judges(record)
    calls = [
        _chat(step, _judge_of(step, judges)) if isinstance(step, ChatEvent) else _image(step)
        for step in record.steps
        if isinstance(step, ChatEvent | ImageEvent)
    ]
    recorded = {s.path for s in record.steps}
    error = record.error
    if error is not None:
        if error.path is not None and error.requests is not None and error.path not in recorded:
            calls.append(_failed(error.path, error))
            recorded.add(error.path)
        calls += [_cut_off(p) for p in dict.fromkeys(error.cancelled_paths) if p not in recorded]
    return tuple(calls)


def call_cells(call: Call) -> tuple[str, ...]:
    """The call's cells under :data:`CALL_COLUMNS`, ``-`` where the record has nothing."""
    return (
        call.path,
        call.role,
        call.model or "-",
        call.protocol or "-",
        "-" if call.tokens is None else f"{call.tokens:,}",
        "-" if call.latency_ms is None else _seconds(call.latency_ms),
        "-" if call.attempts is None else str(call.attempts),
        call.status,
    )


def _seconds(ms: float) -> str:
    """A latency in seconds, to the millisecond: ``0.004 s``, ``12.381 s``."""
    return f"{ms / 1000:.3f} s"


def _judges(record: RunRecord) -> tuple[JudgeResult, ...]:
    """Every judge result of the run: each round's (a multi-round run), else the panel's."""
    scoring = record.blackbox_scoring
    if not isinstance(scoring, ScoringRecord):
        return ()
    found = {j.path: j for j in scoring.judges}
    if scoring.evolution is not None:
        for r in scoring.evolution.rounds:
            found.update({j.path: j for j in r.judges})
    return tuple(found.values())


def _folder(path: str) -> str:
    return path.rpartition("/")[0]


def _strings(value: JsonValue) -> tuple[str, ...] | None:
    """``value`` as a tuple of strings, or None when it is anything else (a step's ``meta``
    is JSON from a transcript)."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v for v in value if isinstance(v, str))
    return None


def _judge_of(step: ChatEvent, judges: tuple[JudgeResult, ...]) -> JudgeView | None:
    """The judge ``step`` is a call of: the one whose record names its path (a judge's
    first call), or one of the same id in the same folder (a ``pairwise`` or ``pointwise``
    judge's other calls, ``judges/<id>.<pair>``)."""
    judge_id = step.meta.get("judge_id")
    judge = next((j for j in judges if j.path == step.path), None)
    if judge is None and isinstance(judge_id, str):
        folder = _folder(step.path)
        judge = next((j for j in judges if j.id == judge_id and _folder(j.path) == folder), None)
    if judge is None:
        return None
    shown = _strings(step.meta.get("order"))
    cards = shown if shown is not None else judge.order
    rationales = judge.rationales or {}
    choice = None
    if shown is not None and len(shown) == 2:
        choice = next((c for c in judge.comparisons or () if (c[0], c[1]) == shown), None)
    return JudgeView(
        judge_id=judge.id,
        protocol=judge.protocol,
        status=judge.status,
        rationales=tuple((c, rationales[c]) for c in cards if c in rationales),
        choice=choice,
        warning=judge.warning,
        error=judge.error,
    )


def _step_status(error: StepError | None, reasks: int) -> tuple[CallOutcome, str]:
    if error is not None:
        return "error", f"error: {error.reason or error.type}"
    if reasks:
        return "reasked", f"ok after {reasks} re-ask{'s' if reasks != 1 else ''}"
    return "ok", "ok"


def _role(step: ChatEvent) -> str:
    role = step.meta.get("role")
    return role if isinstance(role, str) and role else "text"


def _chat(step: ChatEvent, judge: JudgeView | None) -> Call:
    outcome, status = _step_status(step.error, len(step.reasks))
    if judge is not None and judge.status != "ok":
        status += f"; judge {judge.status}"
    messages = []
    if step.system_prompt is not None:
        messages.append(Message("system", step.system_prompt))
    messages.append(Message("user", step.prompt))
    return Call(
        kind="chat",
        path=step.path,
        role=_role(step),
        model=step.params.model,
        tokens=step.usage.total_tokens,
        latency_ms=step.latency_ms,
        attempts=step.attempts,
        outcome=outcome,
        status=status,
        messages=tuple(messages),
        earlier=max(0, step.context_messages - (step.system_prompt is not None)),
        answer=step.response,
        answer_chars=step.response_chars,
        reasks=step.reasks,
        judge=judge,
        facts=tuple(_chat_facts(step)),
    )


def _chat_facts(step: ChatEvent) -> Iterator[tuple[str, str]]:
    params, usage = step.params, step.usage
    model = params.model
    if step.response_model is not None:
        model += f", answered by {step.response_model}"
    if params.backend is not None:
        model += f", backend {params.backend}"
    yield "model", model
    limit = "none" if params.max_output_tokens is None else f"{params.max_output_tokens:,}"
    seed = "none" if params.seed is None else str(params.seed)
    yield "sampling", f"temperature {params.temperature:g}, seed {seed}, max output tokens {limit}"
    cached = "" if usage.cached_tokens is None else f", {usage.cached_tokens:,} cached"
    yield (
        "tokens",
        f"{usage.total_tokens:,} ({usage.prompt_tokens:,} prompt, "
        f"{usage.completion_tokens:,} completion{cached})",
    )
    yield (
        "timing",
        f"started {step.created_at}, {_seconds(step.latency_ms)} "
        f"(of which {_seconds(step.pacing_wait_ms)} held by pacing)",
    )
    yield "answers", f"{step.answers} answer(s) in {step.attempts} transport attempt(s)"
    for note in step.wire_notes:
        yield "wire", note
    if step.error is not None:
        yield "error", _error_text(step.error)


def _error_text(error: StepError) -> str:
    text = f"{error.type}: {error.message}"
    return text if error.status is None else f"{text} (HTTP {error.status})"


def _image(step: ImageEvent) -> Call:
    outcome: CallOutcome
    if step.error is None:
        outcome, status = "ok", "ok"
    elif step.cancelled:
        outcome, status = "cut_off", "cut off"
    else:
        outcome, status = "error", f"error: {step.error.reason or step.error.type}"
    facts = [
        ("model", step.model),
        ("request", f"size {step.size}, quality {step.quality}, seed {step.seed}"),
        ("timing", f"started {step.created_at}, {_seconds(step.latency_ms)}"),
    ]
    if step.received_bytes is not None:
        facts.append(("received", f"{step.format or 'image'}, {step.received_bytes:,} bytes"))
    if step.revised_prompt is not None:
        facts.append(("revised prompt", step.revised_prompt))
    if step.error is not None:
        facts.append(("error", _error_text(step.error)))
    return Call(
        kind="image",
        path=step.path,
        role="image",
        model=step.model,
        tokens=None,
        latency_ms=step.latency_ms,
        attempts=step.attempts,
        outcome=outcome,
        status=status,
        messages=(Message("user", step.prompt),),
        facts=tuple(facts),
    )


def _failed(path: str, error: RunError) -> Call:
    facts = [("error", f"{error.type}: {error.message}")]
    if error.status is not None:
        facts.append(("HTTP status", str(error.status)))
    facts.append(("requests", f"{error.requests} request(s) sent, re-asks included"))
    if error.output_preview is not None:
        facts.append(("last answer", error.output_preview))
    return Call(
        kind="failed",
        path=path,
        role="-",
        model=None,
        tokens=None,
        latency_ms=None,
        attempts=error.attempts,
        outcome="failed",
        status=f"failed the run: {error.reason or error.type}",
        reasks=error.reasks,
        facts=tuple(facts),
    )


def _cut_off(path: str) -> Call:
    return Call(
        kind="cut_off",
        path=path,
        role="-",
        model=None,
        tokens=None,
        latency_ms=None,
        attempts=None,
        outcome="cut_off",
        status="cut off",
        facts=(("cut off", "the run was interrupted with this call in flight"),),
    )
