"""The summary of a run, read from its record: what ``image-project`` prints after a run and
``image-project runs show`` prints for a stored one (the same lines, so the two agree)."""

from __future__ import annotations

from collections.abc import Sequence

from image_project.progress import counted
from image_project.record import (
    ContextRecord,
    InjectorRecord,
    RoundRecord,
    RunRecord,
    ScoringRecord,
    run_status,
)

__all__ = ["context_lines", "prompt_lines", "record_lines", "scoring_lines"]


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
        lines += scoring_lines(record.blackbox_scoring)
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
    usage = record.usage
    lines += [
        *files,
        f"  Model calls {usage.model_calls} text + {usage.image_calls} image, "
        f"{usage.total_tokens:,} tokens, {record.timing.wall_s:.1f} s",
    ]
    return lines


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


def scoring_lines(scoring: ScoringRecord) -> list[str]:
    """The selection, the per-judge scores as a small table, and the panel."""
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
    label = _AGGREGATE_LABELS.get(scoring.aggregation, "trimmed")
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
    head = f"  Round {r.index:<5} {len(r.score_table)} judged"
    head += f" ({dropped} near-duplicate dropped)" if dropped else ""
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
    header = (
        "card  " + "".join(f"{j:>{width}} " for j in judges) + f" {label:>8}  penalty  effective"
    )
    lines = [f"  Scores      {header}"]
    for row in scoring.score_table:
        cells = "".join(f"{row.judge_scores.get(j, '-')!s:>{width}} " for j in judges)
        mark = " <" if row.id == scoring.selected_id else ""
        lines.append(
            f"              {row.id:<4}  {cells} {row.aggregate!s:>8}  "
            f"{row.novelty_penalty:>7.1f}  {row.effective_score:>9.1f}{mark}"
        )
    return lines


def _panel_lines(scoring: ScoringRecord) -> list[str]:
    """One line per judge: its status and what it judged by (rubric, profile view, weight,
    model)."""
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
        )
    return lines
