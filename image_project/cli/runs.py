"""The ``image-project runs …`` subcommands (``list``, ``show``, ``export``, ``import``,
``stats``) and ``image-project review``, over the run store.

The parser is built by :mod:`image_project.cli.command` (argparse only, so the CLI stays light to
import); this module, which imports SQLAlchemy through :mod:`image_project.store.db`, is
imported only when a ``runs`` command runs. Exit codes: 0 done; 1 a store error or a file
that could not be imported (the others are imported); 2 a usage error (an unknown or
ambiguous run id, a bad ``--since``), a configuration error, or an output path (``--out``)
that cannot be written (one line naming it, no traceback).

It sits beside :mod:`image_project.run`, above the packages it puts together (the store, the
summary lines, the review site, the panel statistics), rather than inside the store, which
knows none of them.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import ValidationError

from image_project.cli.summary import (
    call_lines,
    calls_lines,
    card_lines,
    record_lines,
    round_lines,
    rounds_lines,
    terminal_safe,
)
from image_project.config.store_url import sqlite_path
from image_project.errors import StoreError
from image_project.extras import missing_extra
from image_project.record.run import RunRecord, run_status, stopped_reason
from image_project.record.scoring import ScoringRecord
from image_project.store.db import RunStore, RunSummary, parse_since

if TYPE_CHECKING:
    from image_project.artifacts.pending import RepairScope

EXPORT_CSV_FIELDS: tuple[str, ...] = (
    "generation_id",
    "created_at",
    "status",
    "seed",
    "seq",
    "title",
    "image_path",
    "concepts",
    "scoring",
    "selected_id",
    "selection_mode",
    "judges",
    "total_tokens",
    "model_calls",
    "wall_s",
    "error_type",
    "error_phase",
    "error_message",
)


def run_command(
    args: argparse.Namespace,
    url: str,
    out: IO[str] | None = None,
    *,
    transcripts: Path | None = None,
    scope: RepairScope | None = None,
) -> int:
    """Run ``runs <args.runs_command>`` against the store at ``url``, printing to ``out``
    (standard output by default). ``transcripts`` is the folder where this store's runs
    write their transcripts (``image.log_path`` of the configuration whose store this is):
    ``runs list`` then says how many of them the store lacks, with the exact command that
    imports them. ``scope`` is where the configuration's runs write their records: the only
    files a pending transcript's repair (``runs import``) may act on; None refuses every
    pending transcript."""
    out = sys.stdout if out is None else out
    action = args.runs_command
    database = sqlite_path(url)
    if action != "import" and database is not None and not database.exists():
        print(
            f"no run store yet at {database}: runs are written there as they finish, and "
            "'runs import PATHS' fills it from transcripts",
            file=sys.stderr,
        )
        if action == "list" and transcripts is not None:
            _say_unstored(url, transcripts, set(), scope)
        return 1 if action == "show" else 0
    try:
        since = parse_since(args.since) if getattr(args, "since", None) else None
    except ValueError as exc:
        print(f"error: --{exc}", file=sys.stderr)
        return 2
    try:
        with RunStore.open(url) as store:
            if action == "list":
                code = _list(store, args, since, out)
                if transcripts is not None:
                    _say_unstored(url, transcripts, store.stored_ids(), scope)
                return code
            if action == "show":
                return _show(
                    store,
                    args.id,
                    out,
                    round_index=getattr(args, "round", None),
                    card=getattr(args, "card", None),
                    calls=getattr(args, "calls", False),
                    call=getattr(args, "call", None),
                )
            if action == "export":
                return _export(store, args, since, out)
            if action == "stats":
                return _stats(store, args, since, out)
            return _import(store, args.paths, out, scope)
    except StoreError as exc:
        print(f"store error: {exc}", file=sys.stderr)
        return 1


def review_stored_runs(
    url: str,
    out_dir: Path,
    *,
    last: int,
    image_base: Path,
    image_dirs: Sequence[Path] | None = None,
    out: IO[str] | None = None,
    max_image_pixels: int | None = None,
) -> int:
    """``image-project review``: the static review site of the ``last`` newest stored runs
    (:mod:`image_project.review`, imported only now: Jinja2 and matplotlib), publishing
    only images under ``image_dirs``. Exit 2 before anything is read when the ``review``
    extra is not installed, naming it."""
    out = sys.stdout if out is None else out
    missing = missing_extra("the review site", "jinja2", "matplotlib")
    if missing is not None:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    database = sqlite_path(url)
    if database is not None and not database.exists():
        print(f"no run store yet at {database}: nothing to review", file=sys.stderr)
        return 1
    try:
        with RunStore.open(url) as store:
            records = store.records(last=last)
    except StoreError as exc:
        print(f"store error: {exc}", file=sys.stderr)
        return 1
    from image_project.review.site import review_command

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot write the review site to {out_dir}: {_reason(exc)}", file=sys.stderr)
        return 2
    try:
        from image_project.review.site import DEFAULT_MAX_IMAGE_PIXELS

        return review_command(
            records,
            out_dir,
            image_base=image_base,
            image_dirs=image_dirs,
            out=out,
            max_image_pixels=max_image_pixels or DEFAULT_MAX_IMAGE_PIXELS,
        )
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and Path(exc.filename) != out_dir else ""
        print(
            f"error: cannot write the review site to {out_dir}{where}: {_reason(exc)}",
            file=sys.stderr,
        )
        return 2


# --------------------------------------------------------------------------- list


def _stats(store: RunStore, args: argparse.Namespace, since: Any, out: IO[str]) -> int:
    """``runs stats``: the judge-panel table (:mod:`image_project.analysis`) of the runs the
    filters select (all runs unless ``--limit``)."""
    from image_project.analysis.table import stats_command

    records = store.records(last=args.limit, failed=args.failed, judge=args.judge, since=since)
    if not records:
        return _none_match(store)
    table = io.StringIO()
    code = stats_command(records, table)
    out.write(terminal_safe(table.getvalue()))
    return code


def _none_match(store: RunStore) -> int:
    """No stored run matches the filters: said on stderr (stdout stays what a pipe reads),
    exit 0, for ``runs list`` and ``runs stats`` alike: an empty answer to a query is an
    answer, not a failure (as ``git log`` or ``find`` with no match)."""
    print(f"no stored runs match (store: {store.safe_url})", file=sys.stderr)
    return 0


def _list(store: RunStore, args: argparse.Namespace, since: Any, out: IO[str]) -> int:
    found = store.summaries(last=args.limit, failed=args.failed, judge=args.judge, since=since)
    if not found:
        return _none_match(store)
    print(format_summaries(found), file=out)
    return 0


def _say_unstored(url: str, folder: Path, stored: set[str], scope: RepairScope | None) -> None:
    """One line on stderr when transcripts in ``folder`` are missing from the store (a run
    killed between its transcript and its store write, a store outage): how many, and the
    exact command that imports them into this store (idempotent)."""
    from image_project.artifacts.pending import (
        describe_all,
        describe_without_transcript,
        runs_without_transcript,
    )
    from image_project.config.store_url import import_command, redact_url
    from image_project.store.writer import unstored_transcripts

    command = import_command(url, folder, config=scope.config if scope else None)
    for line in describe_all(folder, command, scope):
        print(line, file=sys.stderr)
    without = runs_without_transcript(folder)
    if without:
        print(describe_without_transcript(folder, without, stored), file=sys.stderr)
    missing = unstored_transcripts(folder, stored)
    if missing:
        print(
            f"{len(missing)} run transcript(s) in {folder} are not in the store "
            f"{redact_url(url)} (runs stopped before their store write); import them: "
            f"{import_command(url, folder)}",
            file=sys.stderr,
        )


def format_summaries(found: Sequence[RunSummary]) -> str:
    """The ``runs list`` table: newest first, one line per run (every field from a record
    escaped for the terminal, its newlines included)."""
    lines = [f"{'generation id':<26} {'created (UTC)':<19}  {'status':<11}  {'seq':>4}  what"]
    for run in found:
        seq = f"#{run.seq:03d}" if run.seq is not None else "-"
        lines.append(
            f"{terminal_safe(run.generation_id, newlines=False):<26} "
            f"{run.created_at:%Y-%m-%d %H:%M:%S}  {run.status:<11}  "
            f"{seq:>4}  {terminal_safe(_what(run), newlines=False)}"
        )
    return "\n".join(lines)


def _what(run: RunSummary) -> str:
    if run.status != "ok":
        message = (run.error_message or "").splitlines()[0] if run.error_message else ""
        if len(message) > 70:
            message = message[:69] + "…"
        return f"{run.error_type} in {run.error_phase}: {message}"
    what = run.title or "(prompt only)"
    if run.judges:
        ok = sum(1 for _, status in run.judges if status == "ok")
        what += f"  [judges {ok}/{len(run.judges)} ok: {', '.join(j for j, _ in run.judges)}]"
    return what


# --------------------------------------------------------------------------- show


def _show(
    store: RunStore,
    ref: str,
    out: IO[str],
    *,
    round_index: int | None = None,
    card: str | None = None,
    calls: bool = False,
    call: str | None = None,
) -> int:
    try:
        record = store.find(ref)
    except KeyError as exc:  # no such run, or an ambiguous start: a usage error
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # the stored text is input: name it, no traceback
        print(f"error: {_unreadable(ref, exc)}", file=sys.stderr)
        return 1
    try:
        lines = show_lines(record, round_index=round_index, card=card, calls=calls, call=call)
    except (KeyError, ValueError) as exc:  # it may quote the record: escaped
        print(f"error: {terminal_safe(exc.args[0], newlines=False)}", file=sys.stderr)
        return 2
    print(terminal_safe("\n".join(lines)), file=out)
    return 0


def show_lines(
    record: RunRecord,
    *,
    round_index: int | None = None,
    card: str | None = None,
    calls: bool = False,
    call: str | None = None,
) -> list[str]:
    """``runs show``: the run's summary as the CLI printed it (:mod:`image_project.cli.summary`),
    with its status and error, and (for a scoring run) the score table and each judge's
    status; for a multi-round run then every round (each card's origin, scores, survivor
    category, proposer and reason, the selector and any fallback) and the final pick's rule.
    ``round_index`` prints only that round, ``card`` only that card's history (its parent
    chain, scores per round, survivor reasons). Raises ``ValueError`` for either on a run
    without scoring and ``KeyError`` (naming what there is) for an unknown round or card.
    ``calls`` lists every model call of the run, one line each; ``call`` prints the call at
    that path whole (its request, re-asks, answer, judge's view), a ``KeyError`` naming the
    closest paths when there is none."""
    if calls:
        return calls_lines(record)
    if call is not None:
        return call_lines(record, call)
    scoring = record.blackbox_scoring
    stopped = stopped_reason(record)
    if round_index is not None or card is not None:
        if not isinstance(scoring, ScoringRecord):
            option = "--round" if round_index is not None else "--card"
            raise ValueError(f"{option}: run {record.generation_id} has no scoring record")
        head = f"Generation {record.generation_id}  ({run_status(record)})"
        if round_index is not None:
            return [head, *round_lines(scoring, round_index, stopped=stopped)]
        return [head, *card_lines(scoring, card or "")]
    lines = record_lines(record, whole_prompt=False, with_status=True)
    if isinstance(scoring, ScoringRecord) and scoring.evolution is not None:
        lines += ["", *rounds_lines(scoring, stopped=stopped)]
    return lines


# --------------------------------------------------------------------------- export


def _export(store: RunStore, args: argparse.Namespace, since: Any, out: IO[str]) -> int:
    records = store.records(last=args.limit, failed=args.failed, judge=args.judge, since=since)
    if args.out is not None:
        try:
            with open(args.out, "w", encoding="utf-8", newline="") as handle:
                _write_export(records, args.format, handle)
        except OSError as exc:
            print(f"error: cannot write the export to {args.out}: {_reason(exc)}", file=sys.stderr)
            return 2
        print(f"exported {len(records)} run(s) to {args.out}", file=sys.stderr)
    else:
        _write_export(records, args.format, out)
    return 0


def _unreadable(ref: str, exc: ValidationError) -> str:
    """A stored record that is not a run record of this version, in one line."""
    return f"the stored record of run {ref} is not a run record of this version ({_first(exc)})"


def _first(exc: ValidationError) -> str:
    """The first problem pydantic found, with where: ``steps.3.path: Field required``."""
    first = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in first["loc"])
    return f"{loc + ': ' if loc else ''}{first['msg']}"


def _reason(exc: OSError) -> str:
    """An OSError in a few words: ``Permission denied``, ``No such file or directory``, …"""
    return exc.strerror or str(exc) or type(exc).__name__


def _write_export(records: Sequence[RunRecord], fmt: str, out: IO[str]) -> None:
    if fmt == "jsonl":
        for record in records:
            out.write(record.model_dump_json() + "\n")
        return
    writer = csv.DictWriter(out, fieldnames=EXPORT_CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow(_csv_row(record))


def _csv_row(record: RunRecord) -> dict[str, Any]:
    from image_project.record.scoring import ScoringRecord

    scoring = record.blackbox_scoring
    scored = isinstance(scoring, ScoringRecord)
    selected_id = scoring.selected_id if isinstance(scoring, ScoringRecord) else None
    mode = scoring.selection_mode if isinstance(scoring, ScoringRecord) else None
    judges = (
        json.dumps({j.id: j.status for j in scoring.judges})
        if isinstance(scoring, ScoringRecord)
        else ""
    )
    title, error = record.title_generation, record.error
    return {
        "generation_id": record.generation_id,
        "created_at": record.created_at,
        "status": run_status(record),
        "seed": record.seed,
        "seq": title.seq if title else "",
        "title": title.title if title else "",
        "image_path": record.image_path or "",
        "concepts": json.dumps(list(record.selected_concepts), ensure_ascii=False),
        "scoring": scored,
        "selected_id": selected_id or "",
        "selection_mode": mode or "",
        "judges": judges,
        "total_tokens": record.usage.total_tokens,
        "model_calls": record.usage.model_calls,
        "wall_s": record.timing.wall_s,
        "error_type": error.type if error else "",
        "error_phase": error.phase if error else "",
        "error_message": error.message if error else "",
    }


# --------------------------------------------------------------------------- import


def iter_records(path: Path) -> Iterator[RunRecord | ValueError]:
    """The records in ``path``: a transcript (``.json``), a ``runs export --format jsonl``
    file (``.jsonl``, one record a line), or a directory (its ``*_transcript.json``). A file
    or line that cannot be read is yielded as a ValueError naming it (and its line), and the
    rest are still read: one bad transcript does not hide the others."""
    if path.is_dir():
        for child in sorted(path.glob("*_transcript.json")):
            yield from iter_records(child)
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        yield ValueError(f"{path}: cannot read it ({exc})")
        return
    if path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                yield _parsed(line, f"{path}:{number}")
        return
    yield _parsed(text, str(path))


def _parsed(text: str, where: str) -> RunRecord | ValueError:
    try:
        return _parse(text, where)
    except ValueError as exc:
        return exc


def _parse(text: str, where: str) -> RunRecord:
    try:
        return RunRecord.model_validate_json(text)
    except ValidationError as exc:
        raise ValueError(f"{where}: not a run record of this version ({_first(exc)})") from exc


def _repair(
    paths: Sequence[Path], out: IO[str], problems: list[str], scope: RepairScope | None
) -> list[Path]:
    """Complete or roll back the runs killed in their records phase whose pending
    transcripts are in ``paths`` (folders, or the pending files themselves:
    :mod:`image_project.artifacts.pending`), saying what was done; the paths to import then (a
    pending file's place is taken by the transcript its repair wrote). A pending transcript
    that names anything but its own run's files in ``scope`` is refused, one line each."""
    from image_project.artifacts.pending import PENDING_SUFFIX, left_by_killed_runs, repair

    to_import: list[Path] = []
    for path in paths:
        pending_file = path.name.endswith(PENDING_SUFFIX)
        folder = path.parent if pending_file else path
        if not (pending_file or path.is_dir()):
            to_import.append(path)
            continue
        for leftover in left_by_killed_runs(folder, scope):
            if pending_file and leftover.path != path:
                continue
            try:
                repaired = repair(leftover, scope)
            except Exception as exc:  # this run's files refused: name it, go on
                problems.append(
                    f"{leftover.path}: could not be repaired ({type(exc).__name__}: {exc})"
                )
                continue
            if repaired.outcome == "refused":
                problems.append(repaired.line)
                continue
            print(f"repaired {repaired.line}", file=out)
            if pending_file and repaired.transcript is not None:
                to_import.append(repaired.transcript)
        if not pending_file:
            to_import.append(path)
    return to_import


def _import(store: RunStore, paths: Sequence[Path], out: IO[str], scope: RepairScope | None) -> int:
    written = skipped = 0
    problems: list[str] = []
    for path in _repair(paths, out, problems, scope):
        for record in iter_records(path):
            if isinstance(record, ValueError):
                problems.append(str(record))
                continue
            try:
                imported = store.import_record(record)
            except ValueError as exc:  # this run's values refused: skip it, name it, go on
                problems.append(f"{path}: {exc}")
                continue
            if imported:
                written += 1
            else:
                skipped += 1
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    print(
        f"imported {written} run(s) into {store.safe_url}; {skipped} already stored"
        + (
            f"; {len(problems)} file(s), line(s) or run(s) could not be imported"
            if problems
            else ""
        ),
        file=out,
    )
    return 1 if problems else 0
