"""The summary of a run, read from its record: what ``image-project`` prints after a run and
``image-project runs show`` prints for a stored one (the same lines, so the two agree).

Text from a record is data (a model's answer, an imported transcript): what reaches the
terminal goes through :func:`terminal_safe`, as the review site's templates escape HTML."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from image_project.cli.progress import counted
from image_project.record.calls import (
    CALL_COLUMNS,
    JudgeView,
    call_cells,
    choice_text,
    reask_head,
    reask_note,
    run_calls,
)
from image_project.record.context import ContextRecord, InjectorRecord
from image_project.record.gates import gate_counts
from image_project.record.run import RunRecord, run_status, scoring_absent, stopped_reason
from image_project.record.scoring import (
    JudgeResult,
    RoundCandidate,
    RoundRecord,
    ScoreRow,
    ScoringRecord,
    SelectorRecord,
    named_protocol,
    pick_rule,
)

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_NEWLINE = re.compile(_CONTROL.pattern[:-1] + "\n]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, *, newlines: bool = True) -> str:
    """``text`` with every character a terminal would act on instead of showing shown as an
    escape (``\\x1b``, ``\\r``, ``\\x07`` ...: C0 and C1 controls, DEL, and the Unicode
    bidirectional overrides that reorder what is shown): an imported title cannot set the
    window title, colour the screen, move the cursor or rewrite a line. Tabs are kept, and
    newlines unless ``newlines`` is False (a one-line field)."""
    pattern = _CONTROL if newlines else _CONTROL_OR_NEWLINE
    return pattern.sub(_escaped, text)


def record_lines(
    record: RunRecord,
    *,
    whole_prompt: bool,
    with_status: bool = False,
    files: Sequence[str] = (),
) -> list[str]:
    """The summary lines of ``record``: the run, its concepts, title, selection (a scoring
    run), final prompt (whole, or its first line), image, 4K image, ``files`` (lines the caller adds,
    such as where the transcript is) and usage. ``with_status`` adds the run's status and,
    for a run that did not succeed, its error."""
    backend = record.backend
    lines = [
        f"Generation {record.generation_id}  (seed {record.seed}, {backend.provider} backend, "
        f"{backend.execution_mode})"
    ]
    if with_status:
        lines.append(f"  Status      {run_status(record)}  (created {record.created_at})")
    lines.append(f"  Concepts    {' | '.join(record.selected_concepts)}")
    if with_status and record.error is not None:
        error = record.error
        where = f" at {error.path}" if error.path else ""
        lines.append(f"  Error       {error.type} in phase {error.phase}{where}: {error.message}")
    if isinstance(record.context, ContextRecord):
        lines += context_lines(record.context)
    title = record.title_generation
    if title is not None:
        lines.append(f"  Title       #{title.seq:03d} - {title.title}")
    if isinstance(record.blackbox_scoring, ScoringRecord):
        lines += scoring_lines(record.blackbox_scoring, stopped=stopped_reason(record))
    elif with_status and record.error is not None:
        lines.append(f"  Scoring     not recorded: {scoring_absent(record)}")
    if record.final_image_prompt:
        lines += prompt_lines(record.final_image_prompt, whole=whole_prompt)
    if record.image_path is not None:
        size = f" ({record.image_bytes:,} bytes)" if record.image_bytes is not None else ""
        lines.append(f"  Image       {record.image_path}{size}")
    upscaled = record.upscale
    if upscaled is not None:
        lines.append(
            f"  Image 4K    {upscaled.path} ({upscaled.size}, {upscaled.method}, "
            f"{upscaled.bytes:,} bytes)"
        )
    lines += gate_lines(record)
    usage = record.usage
    lines += [
        *files,
        f"  Model calls {usage.model_calls} text + {usage.image_calls} image, "
        f"{usage.total_tokens:,} tokens, {record.timing.wall_s:.1f} s",
    ]
    return lines


def gate_lines(record: RunRecord) -> list[str]:
    """One line naming every quality gate that fired in the run (none when none did): the
    answers it rejected and the steps that stayed invalid."""
    fired = [
        f"{name} {c.rejected} rejected" + (f", {c.failed} failed" if c.failed else "")
        for name, c in gate_counts(record).items()
        if c.rejected or c.failed
    ]
    return [f"  Gates       {'; '.join(fired)}"] if fired else []


_PLACES = {
    "system": "the system prompt",
    "prompt": "the first stage prompt",
    "both": "the system prompt and the first stage prompt",
}


def context_lines(context: ContextRecord) -> list[str]:
    """The context injectors' lines: the date and where the guidance went, then one line per
    injector (applied or not, why, and the chance it drew)."""
    source = "fixed" if context.date_source == "fixed" else "today"
    where = _PLACES[context.injection_location] if context.guidance else "nowhere (none applied)"
    lines = [f"  Context     {context.date_used} ({source}); guidance in {where}"]
    lines += [f"              {_injector_line(i)}" for i in context.injectors]
    return lines


def _injector_line(injector: InjectorRecord) -> str:
    meta = injector.metadata
    facts = [str(meta[k]) for k in ("season", "holiday", "holiday_date") if meta.get(k)]
    line = f"{injector.name}: {'applied' if injector.applied else 'not applied'}"
    line += f" ({injector.reason}"
    if injector.probability is not None and injector.roll is not None:
        line += f"; roll {injector.roll:.3f} vs p {injector.probability:.3f}"
    line += ")"
    return line + (f" {' '.join(facts)}" if facts else "")


def prompt_lines(prompt: str, *, whole: bool) -> list[str]:
    """The final prompt: whole for a prompt-only run (the prompt is what the run made; its
    lines indented under the label), else its first line cut at 100 characters."""
    lines = [ln.strip() for ln in prompt.splitlines() if ln.strip()]
    if not whole:
        first = lines[0] if lines else ""
        return [f"  Prompt      {first[:99] + '…' if len(first) > 100 else first}"]
    return [f"  Prompt      {lines[0] if lines else ''}"] + [f"{'':14}{ln}" for ln in lines[1:]]


_AGGREGATE_LABELS = {"median": "median", "weighted_median": "w.median", "mean": "mean"}
_NORMALISE_MARKS = {"ranks": "(r)", "zscores": "(z)", "robust": "(rz)"}


def _label(scoring: ScoringRecord) -> str:
    """The aggregate's column label: the aggregation, ``(r)`` / ``(z)`` / ``(rz)`` after it
    when the judges' scores were normalised by ranks, z-scores or robust z-scores first."""
    label = _AGGREGATE_LABELS.get(scoring.aggregation, "trimmed")
    return label + _NORMALISE_MARKS.get(scoring.normalise, "")


def scoring_lines(scoring: ScoringRecord, *, stopped: str = "") -> list[str]:
    """The selection (or, when none was made, why: ``stopped``), the per-judge scores as a
    small table, and the panel."""
    card = scoring.selected_card
    hook = card.hook if card is not None else ""
    if len(hook) > 80:
        hook = hook[:79] + "…"
    roll, mode = scoring.exploration_roll, scoring.selection_mode
    why = (
        f"roll {roll:.3f} {'<' if mode == 'explore' else '>='} rate {scoring.exploration_rate:g}"
        if roll is not None
        else ""
    )
    label = _label(scoring)
    if scoring.selected_id is None:
        lines = [f"  Selected    no card: {stopped or 'no selection was made'}"]
    else:
        lines = [
            f"  Selected    idea {scoring.selected_id}: {label} {scoring.selected_score}, "
            f"{mode} ({why})",
            f"              {hook!r}",
        ]
    if scoring.evolution is not None:
        lines += [_round_line(r, label) for r in scoring.evolution.rounds]
    if scoring.score_table:
        lines += _score_table(scoring, label)
    lines += _panel_lines(scoring)
    novelty = scoring.novelty
    motifs = ", ".join(m.word for m in novelty.motifs) or "none"
    lines.append(
        "  Novelty     "
        + (
            f"on ({counted(novelty.rows, 'recent prompt')}, motifs: {motifs})"
            if novelty.used
            else "off"
        )
    )
    return lines


def _round_line(r: RoundRecord, label: str) -> str:
    """One round: its best card, then its survivors and their categories (and who chose)."""
    best = min(
        r.score_table, key=lambda row: (-row.effective_score, -row.aggregate, row.id), default=None
    )
    dropped = sum(1 for c in r.candidates if c.dropped is not None)
    invalid = sum(1 for c in r.candidates if c.invalid is not None)
    head = f"  Round {r.index:<5} {len(r.score_table)} judged"
    head += f" ({dropped} near-duplicate dropped)" if dropped else ""
    head += f" ({invalid} invalid dropped)" if invalid else ""
    head += f", best {best.id} {label} {best.aggregate}" if best else ""
    if r.survivors and r.selector is not None:
        chosen = ", ".join(f"{s.id} {s.category}" for s in r.survivors)
        who = r.selector.kind + (" -> code FALLBACK" if r.selector.status == "fallback" else "")
        head += f"; survivors {chosen} ({who})"
    return head


def _score_table(scoring: ScoringRecord, label: str) -> list[str]:
    """One column per judge (``-`` where a judge is not ``ok``), the aggregate, the penalty
    and the effective score; ``<`` marks the selected card."""
    judges = [j.id for j in scoring.judges]
    width = max(5, *(len(j) for j in judges))
    wide = max(8, len(label))
    header = (
        "card  "
        + "".join(f"{j:>{width}} " for j in judges)
        + f" {label:>{wide}}  penalty  effective"
    )
    lines = [f"  Scores      {header}"]
    for row in scoring.score_table:
        cells = "".join(f"{row.judge_scores.get(j, '-')!s:>{width}} " for j in judges)
        mark = " <" if row.id == scoring.selected_id else ""
        lines.append(
            f"              {row.id:<4}  {cells} {row.aggregate!s:>{wide}}  "
            f"{row.novelty_penalty:>7.1f}  {row.effective_score:>9.1f}{mark}"
        )
    return lines


def _panel_lines(scoring: ScoringRecord) -> list[str]:
    """One line per judge: its status and what it judged by (rubric, profile view, weight,
    model, and how it was asked when that is not ``list``)."""
    judges = scoring.judges
    if not judges:
        return []
    width = {
        "id": max(len(j.id) for j in judges),
        "rubric": max(len(j.rubric) for j in judges),
        "profile": max(len(j.profile) for j in judges),
    }
    lines = []
    for index, j in enumerate(judges):
        lead = "  Judges      " if index == 0 else " " * 14
        lines.append(
            f"{lead}{j.id:<{width['id']}}  {j.status:<11} rubric {j.rubric:<{width['rubric']}}"
            f"  profile {j.profile:<{width['profile']}}  weight {j.weight:g}  {j.model}"
            + (f"  protocol {p}" if (p := named_protocol(j.protocol)) else "")
        )
    warned = [f"  WARNING     judge {j.id}: {j.warning}" for j in judges if j.warning]
    return lines + warned + _one_model_warning(judges)


def _one_model_warning(judges: Sequence[JudgeResult]) -> list[str]:
    """A warning when two or more judges all ran on one model: their errors move together,
    by how much their own scores cannot tell (docs/panel.md, "Know your panel")."""
    models = {j.model for j in judges}
    if len(judges) < 2 or len(models) != 1:
        return []
    return [
        f"  WARNING     all {len(judges)} judges use one model ({models.pop()}): their errors "
        f"move together, so the panel acts like somewhere between 1 and {len(judges)} "
        "judges; give a judge another model to measure it (runs stats)"
    ]


# --------------------------------------------------------------------------- why this card


def _rounds(scoring: ScoringRecord) -> tuple[RoundRecord, ...]:
    """The rounds of the record; a one-round run's table as its round 0."""
    if scoring.evolution is not None:
        return scoring.evolution.rounds
    return (
        RoundRecord(
            index=0,
            candidates=tuple(
                RoundCandidate(
                    id=c.id,
                    kind="card",
                    parent=None,
                    directive=c.direction,
                    seed=c.seed,
                    card=c.card,
                )
                for c in scoring.candidates
            ),
            judges=scoring.judges,
            score_table=scoring.score_table,
        ),
    )


def _origin(c: RoundCandidate) -> str:
    if c.kind == "card":
        return "first card"
    if c.kind == "parent":
        return "kept"
    return f"variant of {c.parent}"


def _selector_text(selector: SelectorRecord) -> list[str]:
    who = "code" if selector.kind == "code" else f"the LLM selector ({selector.model or 'model'})"
    line = f"survivors chosen by {who}"
    if selector.kind == "llm":
        line += f", {counted(selector.attempts, 'answer')}"
    if selector.status == "fallback":
        line += f" -> code FALLBACK: {selector.warning or 'the LLM selector failed'}"
    elif selector.summary:
        line += f": {selector.summary!r}"
    return [line]


def round_lines(scoring: ScoringRecord, index: int, *, stopped: str = "") -> list[str]:
    """One round (``runs show ID --round N``): its selector, then one line per card (where it
    came from, each judge's score, the aggregate, the novelty penalty, the effective score,
    its survivor category and who proposed it), then each survivor's reason. ``<`` marks the
    final pick. Raises ``KeyError`` naming the rounds there are."""
    rounds = {r.index: r for r in _rounds(scoring)}
    if index not in rounds:
        raise KeyError(f"--round: got {index}, the run has rounds {_span(sorted(rounds))}")
    r = rounds[index]
    last = max(rounds) == index
    label = _label(scoring)
    judges = [j.id for j in r.judges]
    width = max(5, *(len(j) for j in judges)) if judges else 5
    head = f"Round {r.index}: {len(r.score_table)} judged of {len(r.candidates)} cards"
    lines = [head]
    if r.selector is not None:
        lines += [f"  {line}" for line in _selector_text(r.selector)]
    lines.append(
        f"  {'card':<4}  {'from':<13} "
        + "".join(f"{j:>{width}} " for j in judges)
        + f" {label:>{max(8, len(label))}}  penalty  effective  survivor"
    )
    table = {row.id: row for row in r.score_table}
    survivors = {s.id: s for s in r.survivors}
    picked = scoring.selected_id if last else None
    for c in r.candidates:
        row = table.get(c.id)
        survivor = survivors.get(c.id)
        tail = f"{survivor.category} ({survivor.proposed_by})" if survivor else ""
        if c.dropped is not None:
            body = (
                f"dropped: near-duplicate of {c.dropped.of} "
                f"(distance {c.dropped.distance:.2f} < {c.dropped.threshold:g})"
            )
        elif c.invalid is not None:
            body = "dropped: invalid answer after the re-asks"
        elif row is None:
            body = "not judged"
        else:
            body = _row_cells(row, judges, width, max(8, len(label)))
        mark = " <" if c.id == picked else ""
        lines.append(f"  {c.id:<4}  {_origin(c):<13} {body}  {tail}".rstrip() + mark)
    for s in r.survivors:
        lines.append(f"  {s.id} survived as {s.category} ({s.proposed_by}): {s.reason}")
    if not r.score_table and stopped:
        lines.append(f"  not judged: {stopped}")
    if picked is not None:
        lines.append(f"  final pick {picked}: {pick_rule(scoring)}")
    return lines


def _row_cells(row: ScoreRow, judges: list[str], width: int, wide: int = 8) -> str:
    cells = "".join(f"{row.judge_scores.get(j, '-')!s:>{width}} " for j in judges)
    return (
        f"{cells} {row.aggregate!s:>{wide}}  {row.novelty_penalty:>7.1f}  "
        f"{row.effective_score:>9.1f}"
    )


def _span(values: list[int]) -> str:
    return f"{values[0]}..{values[-1]}" if len(values) > 1 else str(values[0])


def rounds_lines(scoring: ScoringRecord, *, stopped: str = "") -> list[str]:
    """Every round (``runs show ID`` of a multi-round run), oldest first, then the final
    pick's rule; nothing for a one-round run (its table is in the summary)."""
    if scoring.evolution is None:
        return []
    lines: list[str] = []
    for r in scoring.evolution.rounds:
        lines += round_lines(scoring, r.index, stopped=stopped)
    return lines


def card_lines(scoring: ScoringRecord, card_id: str) -> list[str]:
    """One card's whole history (``runs show ID --card X``): its parent chain back to the
    first card, round by round its scores, and why it survived (or that it did not); the
    rule that picked it when it was the final card. Raises ``KeyError`` naming the cards."""
    rounds = _rounds(scoring)
    if scoring.evolution is not None:
        chain = scoring.evolution.history(card_id)
    else:
        chain = tuple((rounds[0], c) for c in rounds[0].candidates if c.id == card_id)
    if not chain:
        known = sorted({c.id for r in rounds for c in r.candidates})
        raise KeyError(f"--card: no card {card_id!r} in this run (cards: {', '.join(known)})")
    label = _label(scoring)
    lines = [f"Card {card_id}: " + " -> ".join(f"{c.id} (round {r.index})" for r, c in chain)]
    last_round = rounds[-1].index
    for r, c in chain:
        hook = c.card.hook if c.card else "(card not generated)"
        lines.append(f"  Round {r.index}  {c.id}  {_origin(c)}: {hook!r}")
        if c.kind == "variant":
            lines.append(f"            directive: {c.directive}")
        row = next((x for x in r.score_table if x.id == c.id), None)
        if c.dropped is not None:
            lines.append(
                f"            dropped before judging: near-duplicate of {c.dropped.of} "
                f"(distance {c.dropped.distance:.2f} < {c.dropped.threshold:g})"
            )
        elif row is None:
            lines.append("            not judged")
        else:
            scores = ", ".join(f"{j} {v}" for j, v in row.judge_scores.items()) or "no ok judge"
            lines.append(
                f"            scores {scores}; {label} {row.aggregate}, penalty "
                f"{row.novelty_penalty:g}, effective {row.effective_score:g}"
            )
        survivor = next((s for s in r.survivors if s.id == c.id), None)
        if survivor is not None:
            lines.append(
                f"            survived as {survivor.category} ({survivor.proposed_by}): "
                f"{survivor.reason}"
            )
        elif r.index != last_round and r.survivors:
            lines.append("            not a survivor")
    final = chain[-1]
    if final[0].index == last_round and scoring.selected_id == card_id:
        lines.append(f"  Final pick: {pick_rule(scoring)}")
    return lines


# --------------------------------------------------------------------------- model calls

_RIGHT = frozenset({"tokens", "latency", "attempts"})


def calls_lines(record: RunRecord) -> list[str]:
    """Every model call of the run (``runs show ID --calls``), one line each under a header,
    the columns aligned: its path, role, model, protocol (a judge's), tokens, latency,
    transport attempts and status (:func:`image_project.record.calls.run_calls`). Each cell
    is escaped for the terminal before it is measured, newlines included, so a call is
    always one line and the columns stay aligned."""
    calls = run_calls(record)
    head = f"Model calls of {record.generation_id}: {len(calls)}"
    if not calls:
        return [head, "  none recorded"]
    rows = [
        CALL_COLUMNS,
        *(tuple(terminal_safe(c, newlines=False) for c in call_cells(call)) for call in calls),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(CALL_COLUMNS))]
    lines = [head]
    for row in rows:
        cells = [
            f"{cell:>{width}}" if name in _RIGHT else f"{cell:<{width}}"
            for name, cell, width in zip(CALL_COLUMNS, row, widths, strict=True)
        ]
        lines.append(("  " + "  ".join(cells)).rstrip())
    return lines


def call_lines(record: RunRecord, path: str) -> list[str]:
    """One call (``runs show ID --call PATH``): its role, status and facts, the request's
    messages, every rejected answer with the reason its re-ask gave, the answer, and for a
    judge's call what the judge's record says of it (protocol, status, the rationale of
    each card it showed, the pairwise choice). Raises ``KeyError`` naming the closest paths
    when no call has ``path``."""
    calls = run_calls(record)
    call = next((c for c in calls if c.path == path), None)
    if call is None:
        raise KeyError(_no_call(record.generation_id, path, [c.path for c in calls]))
    one = _one_line
    protocol = f", protocol {one(call.protocol)}" if call.protocol else ""
    lines = [
        f"Call {one(call.path)}  (run {one(record.generation_id)})",
        f"  {'role':<14}{one(call.role)}{protocol}",
        f"  {'status':<14}{one(call.status)}",
        *(f"  {one(label):<14}{one(text)}" for label, text in call.facts),
    ]
    if call.messages:
        lines += ["", "Request"]
    for message in call.messages:
        if message.role == "user" and call.earlier:
            lines.append(f"  ({call.earlier_note})")
        lines += [f"  {message.role}:", *_indented(message.text)]
    for n, reask in enumerate(call.reasks, start=1):
        lines += [
            "",
            one(reask_head(n, reask, len(call.reasks))),
            f"  ({one(reask_note(reask))})",
            *_indented(reask.response),
        ]
    if call.answer is not None:
        lines += ["", call.answer_head, *_indented(call.answer)]
    elif call.kind == "chat":
        lines += ["", "Answer", "    (none)"]
    if call.judge is not None:
        lines += ["", *map(one, _judge_view_lines(call.judge))]
    return lines


def _one_line(text: str) -> str:
    """A field shown on one line: escaped for the terminal, its newlines too."""
    return terminal_safe(text, newlines=False)


def _no_call(generation_id: str, path: str, paths: Sequence[str]) -> str:
    """``--call PATH`` names no call: the closest paths (those ending with or holding
    ``path``, then the most alike), or that the run has none."""
    if not paths:
        return f"--call: run {generation_id} has no model call"
    near = [p for p in paths if p.endswith("/" + path)] or [p for p in paths if path in p]
    near += difflib.get_close_matches(path, paths, n=3, cutoff=0.4)
    closest = list(dict.fromkeys(near))[:3] or list(paths[:3])
    return (
        f"--call: no call {path!r} in run {generation_id}; did you mean: "
        f"{', '.join(closest)}? ('runs show {generation_id} --calls' lists them)"
    )


def _indented(text: str) -> list[str]:
    """``text`` indented under its heading, split at its newlines only: a carriage return
    or any other line separator in it is escaped where it stands, never a line break."""
    return [f"    {line}" for line in text.split("\n")] if text else ["    (empty)"]


def _judge_view_lines(judge: JudgeView) -> list[str]:
    lines = [judge.head]
    if judge.choice is not None:
        lines.append(f"  pairwise choice: {choice_text(judge.choice)}")
    for card, rationale in judge.rationales:
        lines.append(f"  rationale {card}: {rationale}")
    if judge.warning:
        lines.append(f"  warning: {judge.warning}")
    if judge.error:
        lines.append(f"  error: {judge.error}")
    return lines
