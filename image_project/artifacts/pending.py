"""The pending transcript: the first thing the records phase writes, so that a process killed
anywhere in that phase leaves a record from which everything else is found or rebuilt.

The records phase, in order (:func:`image_project.run.records.write_records` and the
run driver's end of run), each step named by the point after it (:data:`POINTS`)::

    manifest lock taken, seq and title settled          locked
    <log>/<id>_transcript.pending.json                   pending
    the captioned image                                  image
    the captioned 4K image (upscale.enabled)             upscaled
    the manifest row (the commit point)                  manifest_row
    the generations row                                  generations_row
    (manifest lock released)
    <log>/<id>_transcript.json                           transcript
    the pending transcript removed                       pending_removed
    the store row                                        stored

The pending transcript holds the run's whole record as it will be once complete, the two CSV
rows to append and where every file goes. The manifest row is the commit point: a run whose
row is in the manifest happened (its number is taken, its image is the captioned one), so
its repair completes it (the generations row appended if missing, the transcript written);
a run killed before its row never happened (its number may already be another run's), so
its repair rolls it back (its image and 4K image removed, the transcript written saying it
was interrupted in phase ``records``). Either way the transcript is then imported into the
store like any other.

A live run keeps an exclusive ``flock`` on its pending transcript (the kernel drops it when
the process ends, however it ends), so a pending transcript nobody holds is a killed run's:
:func:`left_by_killed_runs` finds those, :meth:`Leftover.describe` says what each left
(naming the files), :func:`repair` does the above. ``image-project runs import <log folder>``
repairs before it imports; the next run and ``runs list`` name what was left and that
command (docs/reliability.md, "Killed while writing records", has the table of what each
kill point leaves, produced by ``tests/faults/test_kill_records.py``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from image_project.artifacts.generations import append_generation_row, read_generations
from image_project.artifacts.manifest import manifest_lock, read_manifest
from image_project.artifacts.transcript import write_transcript
from image_project.record import RunError, RunRecord

__all__ = [
    "PENDING_SUFFIX",
    "POINTS",
    "Leftover",
    "PendingRecords",
    "PendingTranscript",
    "Repaired",
    "at_point",
    "describe_all",
    "left_by_killed_runs",
    "on_point",
    "pending_path",
    "repair",
]

PENDING_SUFFIX = "_transcript.pending.json"
"""A run's pending transcript is ``<image.log_path>/<generation_id>_transcript.pending.json``."""

POINTS: tuple[str, ...] = (
    "locked",
    "pending",
    "image",
    "upscaled",
    "manifest_row",
    "generations_row",
    "transcript",
    "pending_removed",
    "stored",
)
"""The named points of the records phase, in order (see the module docstring)."""

on_point: Callable[[str], None] = lambda point: None  # noqa: E731
"""Called at each of :data:`POINTS` as the run passes it: a test replaces it (in a child
process) to kill the process there; nothing else uses it."""


def at_point(point: str) -> None:
    """The records phase has just passed ``point``."""
    assert point in POINTS, point
    on_point(point)


class PendingRecords(BaseModel):
    """Where a run's records go, and the two rows, as the pending transcript holds them."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    generation_id: str
    transcript: str
    image: str
    upscaled: str | None = None
    manifest: str
    seq: int
    manifest_row: dict[str, str]
    generations: str
    generations_row: dict[str, Any]


class _PendingFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    pending_records: PendingRecords
    record: RunRecord


def pending_path(log_dir: Path, generation_id: str) -> Path:
    return log_dir / f"{generation_id}{PENDING_SUFFIX}"


class PendingTranscript:
    """A live run's pending transcript: written and held (``flock``) until :meth:`remove`."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def write(cls, path: Path, records: PendingRecords, record: RunRecord) -> PendingTranscript:
        """Write the file in full under a temporary name, lock it, sync it and rename it into
        place (the lock stays with the open file): a pending transcript is never seen
        unlocked while its run lives, nor half written."""
        data = _PendingFile(pending_records=records, record=record).model_dump_json(indent=2)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _lock(fd, blocking=True)
            view = memoryview((data + "\n").encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return cls(path, fd)

    def remove(self) -> None:
        """The run's records are complete (or undone): the file goes, then its lock."""
        try:
            self.path.unlink(missing_ok=True)
        finally:
            self.close()

    def close(self) -> None:
        """Let go of the lock, leaving the file (a run that could not finish its records)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _lock(fd: int, *, blocking: bool) -> bool:
    """An exclusive lock on ``fd``; False when ``blocking`` is off and it is held elsewhere.
    Without ``fcntl`` (Windows) there is no lock: every pending transcript then counts as a
    killed run's once its run has ended (the caller says so)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return True
    flags = fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, flags)
    except BlockingIOError:
        return False
    return True


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _is_held(path: Path) -> bool:
    """Whether a live run holds ``path`` (its records phase is going on)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return True  # gone meanwhile: its run finished
    try:
        if not _lock(fd, blocking=False):
            return True
        # Locked by us, so no run holds it: unless its run has just finished (the file
        # unlinked, or another put in its place, after it was opened here).
        try:
            return os.stat(path).st_ino != os.fstat(fd).st_ino
        except OSError:
            return True
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- after a kill


@dataclass(frozen=True)
class Leftover:
    """What a run killed in its records phase left: its pending transcript (``pending`` None
    when the kill cut that file's own write short) and which of its artifacts exist."""

    path: Path
    generation_id: str
    pending: _PendingFile | None
    image: bool = False
    upscaled: bool = False
    manifest_seq: int | None = None
    generations_row: bool = False
    transcript: bool = False

    @property
    def committed(self) -> bool:
        """Its manifest row was written: the run happened, and is completed by the repair."""
        return self.manifest_seq is not None

    def left(self) -> list[str]:
        """What is on disk, in the order it was written, each naming its file."""
        if self.pending is None:
            return [f"a pending transcript cut short ({self.path})"]
        where = self.pending.pending_records
        found = [f"the pending transcript {self.path}"]
        if self.image:
            found.append(f"the image {where.image}")
        if self.upscaled:
            found.append(f"the 4K image {where.upscaled}")
        if self.manifest_seq is not None:
            found.append(f"manifest row #{self.manifest_seq:03d} in {where.manifest}")
        if self.generations_row:
            found.append(f"the generations row in {where.generations}")
        if self.transcript:
            found.append(f"the transcript {where.transcript}")
        return found

    def missing(self) -> list[str]:
        """What a complete run would have and this one lacks (its store row aside)."""
        if self.pending is None:
            return ["everything after it"]
        where = self.pending.pending_records
        lacks = []
        if not self.image:
            lacks.append("the image")
        if where.upscaled is not None and not self.upscaled:
            lacks.append("the 4K image")
        if self.manifest_seq is None:
            lacks.append("the manifest row")
        if not self.generations_row:
            lacks.append("the generations row")
        if not self.transcript:
            lacks.append("the transcript")
        return lacks

    def describe(self, command: str) -> str:
        """One line: the run, what it left, what it lacks, and the command that repairs it."""
        lacks = self.missing()
        return (
            f"run {self.generation_id} was killed while writing its records: it left "
            + ", ".join(self.left())
            + (f"; missing: {', '.join(lacks)}" if lacks else "")
            + f"; repair it: {command}"
        )


def left_by_killed_runs(folder: Path) -> list[Leftover]:
    """The pending transcripts in ``folder`` that no live run holds, inspected."""
    try:
        paths = sorted(folder.glob("*" + PENDING_SUFFIX))
    except OSError:
        return []
    return [_inspect(p) for p in paths if not _is_held(p)]


def _inspect(path: Path) -> Leftover:
    generation_id = path.name[: -len(PENDING_SUFFIX)]
    try:
        pending: _PendingFile | None = _PendingFile.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        pending = None
    if pending is None or pending.pending_records.generation_id != generation_id:
        return Leftover(path, generation_id, None)
    where = pending.pending_records
    seq = next(
        (
            int(row["seq"])
            for row in _rows(read_manifest, where.manifest)
            if row.get("generation_id") == generation_id and row.get("seq", "").isdigit()
        ),
        None,
    )
    return Leftover(
        path,
        generation_id,
        pending,
        image=Path(where.image).is_file(),
        upscaled=where.upscaled is not None and Path(where.upscaled).is_file(),
        manifest_seq=seq,
        generations_row=any(
            row.get("generation_id") == generation_id
            for row in _rows(read_generations, where.generations)
        ),
        transcript=Path(where.transcript).is_file(),
    )


def _rows(read: Callable[[str], list[dict[str, str]]], path: str) -> Iterator[dict[str, str]]:
    try:
        yield from read(path)
    except Exception:  # unreadable: the repair's own write reports the problem
        return


@dataclass(frozen=True)
class Repaired:
    """What :func:`repair` did: ``outcome`` ``completed``, ``rolled_back`` or ``removed``
    (a pending transcript cut short: nothing after it was written), and a line saying so."""

    generation_id: str
    outcome: str
    line: str
    transcript: Path | None


def repair(leftover: Leftover) -> Repaired:
    """Complete or roll back the run ``leftover`` describes (see the module docstring), under
    the manifest lock, and remove its pending transcript; the transcript it writes is then
    imported like any other."""
    gid = leftover.generation_id
    if leftover.pending is None:
        leftover.path.unlink(missing_ok=True)
        return Repaired(
            gid, "removed", f"{gid}: removed {leftover.path}, cut short (nothing after it)", None
        )
    where = leftover.pending.pending_records
    with manifest_lock(Path(where.manifest)):
        leftover = _inspect(leftover.path)  # as it is now, under the lock
        assert leftover.pending is not None
        done: list[str] = []
        transcript = Path(where.transcript)
        if leftover.committed:
            if not leftover.generations_row:
                append_generation_row(Path(where.generations), where.generations_row)
                done.append("generations row appended")
            if not leftover.transcript:
                write_transcript(transcript, _completed(leftover.pending.record, where))
                done.append(f"transcript written ({transcript})")
            outcome = "completed"
        else:
            for name in (where.image, where.upscaled):
                if name is not None and _is_own_file(Path(name), gid) and Path(name).exists():
                    Path(name).unlink()
                    done.append(f"{name} removed")
            if not leftover.transcript:
                write_transcript(transcript, _rolled_back(leftover.pending.record))
                done.append(f"transcript written, interrupted in phase records ({transcript})")
            outcome = "rolled_back"
        leftover.path.unlink(missing_ok=True)
    what = (
        "completed (its manifest row was written)"
        if leftover.committed
        else ("rolled back (killed before its manifest row)")
    )
    return Repaired(
        gid, outcome, f"{gid}: {what}: " + "; ".join(done or ["nothing missing"]), transcript
    )


def _is_own_file(path: Path, generation_id: str) -> bool:
    """Only the run's own images are removed: a name another file could have is left."""
    return path.name in (f"{generation_id}_image.jpg", f"{generation_id}_image_4k.jpg")


def _completed(record: RunRecord, where: PendingRecords) -> RunRecord:
    """The record as the run would have written it: the image sizes read from the files."""
    update: dict[str, Any] = {"image_bytes": _size(where.image)}
    if record.upscale is not None and where.upscaled is not None:
        update["upscale"] = record.upscale.model_copy(update={"bytes": _size(where.upscaled)})
    return record.model_copy(update=update)


def _rolled_back(record: RunRecord) -> RunRecord:
    return record.model_copy(
        update={
            "image_path": None,
            "image_bytes": None,
            "upscale": None,
            "title_generation": None,
            "error": RunError(
                type="interrupted",
                message=(
                    "the process ended while the run wrote its records (killed, or a second "
                    "Ctrl-C), before its manifest row: the run was rolled back by "
                    "`image-project runs import`"
                ),
                phase="records",
            ),
        }
    )


def _size(path: str) -> int | None:
    try:
        return Path(path).stat().st_size
    except OSError:
        return None


def describe_all(folder: Path, command: str) -> list[str]:
    """One line per run killed in its records phase whose leftovers are in ``folder``."""
    return [leftover.describe(command) for leftover in left_by_killed_runs(folder)]
