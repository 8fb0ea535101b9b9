"""The records phase's writes (:func:`write_records`: image, 4K image, manifest row,
generations row, all or nothing under the manifest lock) and the run store write at a run's
end (:func:`save_to_store`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from image_project.artifacts.generations import append_generation_row
from image_project.artifacts.manifest import (
    append_manifest_row,
    existing_titles,
    manifest_lock,
    mark_manifest,
    next_seq,
    read_manifest,
    restore_manifest,
    utc_now_iso,
)
from image_project.artifacts.pending import (
    PendingRecords,
    PendingTranscript,
    RepairScope,
    at_point,
    pending_path,
)
from image_project.artifacts.transcript import transcript_path
from image_project.config.models import AppConfig
from image_project.config.store_url import import_command
from image_project.record.run import RunRecord
from image_project.run.state import RunState, Saved, ToRecord
from image_project.stages.title import TitleResult, resolve_collision
from image_project.store.writer import StoreOutcome, StoreWriter

if TYPE_CHECKING:
    pass


logger = logging.getLogger("image_project.run")


def repair_scope(cfg: AppConfig) -> RepairScope:
    """The files and folders a run of ``cfg`` writes its records to: the only ones a pending
    transcript's repair may act on (:class:`~image_project.artifacts.pending.RepairScope`)."""
    from image_project.config.defaults import BUILTIN_CONFIG

    files = [Path(source) for source in cfg.sources if Path(source).is_file()]
    return RepairScope(
        log_dir=Path(cfg.image.log_path),
        image_dir=Path(cfg.image.generation_path),
        upscale_dir=Path(cfg.effective_upscale_path),
        manifest=Path(cfg.effective_titles_manifest_path),
        generations=Path(cfg.prompt.generations_path),
        config=files[0] if len(files) == 1 and files[0] != BUILTIN_CONFIG else None,
    )


def repair_command(cfg: AppConfig) -> str:
    """The command that repairs what runs of ``cfg`` killed in their records phase left in
    its log folder: ``runs import`` of the folder into its store, with its configuration
    file when one was read (the repair acts only in its folders: :func:`repair_scope`)."""
    folder = Path(cfg.image.log_path)
    return import_command(cfg.effective_store_url, folder, config=repair_scope(cfg).config)


def store_seq(run: RunState, store: StoreWriter, local_next: int) -> int:
    """``seq`` from a store that allocates it (PostgreSQL), else ``local_next``; a store that
    cannot is reported and this machine's manifest number is used."""
    seq, problem = store.claim_seq(local_next, run.generation_id)
    if problem is not None:
        message = (
            f"store: could not allocate the title number in {store.shown_url} ({problem}); "
            f"using #{seq:03d} from this machine's manifest"
        )
        logger.error("%s", message)
        run.say(f"✗ {message}")
    return seq


def save_to_store(
    run: RunState, record: RunRecord, t_path: Path, *, transcript_problem: str | None = None
) -> StoreOutcome | None:
    """Write the run to the store, if there is one; a failure is said loudly (progress line
    and log, with the command that repairs it: ``runs import`` of the transcript with
    ``--store`` the store this run used) and does not change how the run ends: the
    transcript has everything. ``transcript_problem``: the transcript could not be written
    (the driver says so, with this outcome, in one line), so there is nothing to import."""
    if run.store is None:
        return None
    if transcript_problem is not None:
        outcome = run.store.save(record)
        if outcome.written:
            logger.info(
                "Generation %s written to the run store %s", record.generation_id, outcome.url
            )
        return outcome
    interrupted = record.error is not None and record.error.type == "interrupted"
    outcome = run.store.save(record, only_if_ready=interrupted)
    if outcome.written:
        logger.info("Generation %s written to the run store %s", record.generation_id, outcome.url)
        _name_unstored(run, run.store, t_path.parent)
        return outcome
    if outcome.later:  # a campaign worker writes it again once the store answers
        logger.warning(
            "Generation %s not written to %s yet (%s)",
            record.generation_id,
            outcome.url,
            outcome.error,
        )
        return outcome
    message = (
        f"store: run {record.generation_id} was NOT written to {outcome.url} "
        f"({outcome.error}); its transcript has everything: "
        f"{import_command(run.store.url, t_path)}"
    )
    logger.error("%s", message)
    run.say(f"✗ {message}")
    return outcome


def _name_unstored(run: RunState, store: StoreWriter, folder: Path) -> None:
    """Once per store writer (once per CLI process), after a run was written: the transcripts
    in the run's log folder that the store lacks, by count, with the exact command that imports
    them into this store. They are runs that ended between their transcript and their store
    write (killed, or a store outage); ``runs import`` skips what is already stored, so the
    command is safe even when the count includes a run of another process finishing now."""
    missing = store.unstored_once(folder)
    if not missing:
        return
    message = (
        f"store: {len(missing)} run transcript(s) in {folder} are not in {store.shown_url} "
        f"(runs stopped before their store write, e.g. {missing[-1].name}); import them: "
        f"{import_command(store.url, folder)}"
    )
    logger.info("%s", message)
    run.say(f"! {message}")


def _rows(
    run: RunState,
    made: ToRecord,
    seq: int,
    title: TitleResult,
    image_path: Path,
    upscaled_file: Path | None,
) -> tuple[dict[str, str], dict[str, object]]:
    """The manifest row and the generations row of the run (the 4K image's size and method
    are known before it is written: the resize is done)."""
    event = made.picture.event
    up = made.upscaled if upscaled_file is not None else None
    manifest_row = {
        "seq": str(seq),
        "title": title.title,
        "generation_id": run.generation_id,
        "image_prompt": made.final_prompt,
        "image_path": str(image_path),
        "created_at": utc_now_iso(),
        "model": event.model,
        "size": event.size,
        "quality": event.quality,
        "seed": str(run.seed),
        "title_source": title.source,
        "title_raw": title.raw,
        "upscaled_path": str(upscaled_file) if up else "",
        "upscaled_size": f"{up.size[0]}x{up.size[1]}" if up else "",
        "upscale_method": up.method if up else "",
    }
    generations_row: dict[str, object] = {
        "generation_id": run.generation_id,
        "selected_concepts": list(made.concepts),
        "final_image_prompt": made.final_prompt,
        "image_path": str(image_path),
        "created_at": run.created_at,
        "seed": str(run.seed),
    }
    return manifest_row, generations_row


def _write_pending(
    run: RunState,
    made: ToRecord,
    seq: int,
    title: TitleResult,
    caption: str,
    image_path: Path,
    upscaled_file: Path | None,
    manifest_row: dict[str, str],
    generations_row: dict[str, object],
) -> PendingTranscript:
    """The pending transcript (:mod:`image_project.artifacts.pending`): the record as it
    will be once the records are written (the images' sizes in bytes aside), the rows, and
    where everything goes."""
    from image_project.artifacts.upscale import SavedUpscale

    up = made.upscaled if upscaled_file is not None else None
    run.produced.saved = Saved(
        path=image_path,
        bytes=0,
        seq=seq,
        title=title,
        caption=caption,
        upscale=(
            SavedUpscale(upscaled_file, 0, up.size, up.method, up.source_size)
            if up is not None and upscaled_file is not None
            else None
        ),
    )
    try:
        record = run.to_record(None, round(time.perf_counter() - run.started, 3))
    finally:
        run.produced.saved = None
    record = record.model_copy(update={"image_bytes": None})
    log_dir = Path(run.cfg.image.log_path)
    where = PendingRecords(
        generation_id=run.generation_id,
        transcript=str(transcript_path(log_dir, run.generation_id)),
        image=str(image_path),
        upscaled=str(upscaled_file) if upscaled_file is not None else None,
        manifest=str(run.cfg.effective_titles_manifest_path),
        seq=seq,
        manifest_row=manifest_row,
        generations=str(run.cfg.prompt.generations_path),
        generations_row=generations_row,
    )
    return PendingTranscript.write(pending_path(log_dir, run.generation_id), where, record)


def write_records(run: RunState, made: ToRecord, image_path: Path) -> Saved:
    """The records phase in one call (one thread, so a cancellation cannot split it).

    All or nothing, under the manifest lock: allocate seq, settle the title against the
    freshest manifest, write the pending transcript (:mod:`image_project.artifacts.pending`:
    the record from which everything after it is found or rebuilt if the process is killed),
    write the captioned
    image, write the captioned 4K image (when the run made one: ``made.upscaled``), append
    the manifest row (the commit point), append the generations row. If anything after the
    pending transcript fails, the images and it are removed and the manifest is put back as
    it was before this run (safe: the lock is still held), so a failed records phase leaves
    neither an image nor a row behind. The driver then writes the transcript, removes the
    pending transcript (``run.ledger.pending``) and writes the store row."""
    from image_project.artifacts.image import caption_text, save_captioned_frame

    cfg, manifest = run.cfg, run.cfg.effective_titles_manifest_path
    font = cfg.image.caption_font_path
    with manifest_lock(manifest):
        rows = read_manifest(manifest)
        seq = next_seq(rows)
        if run.store is not None:
            seq = store_seq(run, run.store, seq)
        title = resolve_collision(made.title, existing_titles(rows))
        at_point("locked")
        before = mark_manifest(manifest)
        caption = caption_text(seq, title.title)
        upscaled_file: Path | None = None
        upscaled = made.upscaled if made.upscale is not None else None
        if upscaled is not None and made.upscale is not None:
            from image_project.artifacts.upscale import upscaled_path

            upscaled_file = upscaled_path(made.upscale.directory, run.generation_id)
        manifest_row, generations_row = _rows(run, made, seq, title, image_path, upscaled_file)
        pending = run.ledger.pending = _write_pending(
            run, made, seq, title, caption, image_path, upscaled_file, manifest_row, generations_row
        )
        at_point("pending")
        try:
            save_captioned_frame(made.picture.frame, image_path, caption, font_path=font)
            at_point("image")
            up, up_s = None, 0.0
            if upscaled_file is not None and upscaled is not None:
                from image_project.artifacts.upscale import save_upscaled

                started = time.perf_counter()
                up = save_upscaled(
                    upscaled,
                    upscaled_file,
                    base_image=image_path,
                    caption=caption,
                    font_path=font,
                )
                up_s = time.perf_counter() - started
                at_point("upscaled")
            append_manifest_row(manifest, manifest_row)
            at_point("manifest_row")
            append_generation_row(Path(cfg.prompt.generations_path), generations_row)
            at_point("generations_row")
            saved_bytes = image_path.stat().st_size
        except BaseException:
            try:
                image_path.unlink(missing_ok=True)
                if upscaled_file is not None:
                    upscaled_file.unlink(missing_ok=True)
                restore_manifest(manifest, before)
                pending.remove()
                run.ledger.pending = None
            except OSError as undo:
                logger.error(
                    "could not undo this run's records after a failure (%s: %s); check %s, "
                    "%s and %s for a row of generation %s",
                    type(undo).__name__,
                    undo,
                    image_path,
                    upscaled_file or "(no 4K image)",
                    manifest,
                    run.generation_id,
                )
            raise
    return Saved(
        path=image_path,
        bytes=saved_bytes,
        seq=seq,
        title=title,
        caption=caption,
        upscale=up,
        upscale_s=up_s,
    )
