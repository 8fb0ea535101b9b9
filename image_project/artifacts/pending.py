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

A pending transcript is untrusted input: anyone who can write a file into the log folder
could write one. It is read as a regular file, validated (:class:`PendingRecords`), and
acted on only when every path it names is the very file its run would write in the folders
the configuration writes (:class:`RepairScope`: resolved, absolute, no ``..``, no symlink
leading elsewhere) and its rows are its own run's. Anything else makes it *refused*
(:attr:`Leftover.refused`): one line naming the file and what is wrong, and nothing is read
through it, written or removed (``tests/faults/test_crafted_pending.py``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from image_project.artifacts.generations import append_generation_row, read_generations
from image_project.artifacts.manifest import manifest_lock, read_manifest
from image_project.artifacts.transcript import write_transcript
from image_project.record.ids import GENERATION_ID_PATTERN, generation_id_problem
from image_project.record.run import RunError, RunRecord

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


def _plain_path(text: str) -> str:
    """An absolute path with no ``..`` and no NUL (where it leads is :class:`RepairScope`'s
    question)."""
    if "\0" in text:
        raise ValueError("a path with a NUL character")
    path = Path(text)
    if not path.is_absolute():
        raise ValueError(f"{text!r} is not an absolute path")
    if ".." in path.parts:
        raise ValueError(f"{text!r} has a '..' in it")
    return text


_Path = Annotated[str, AfterValidator(_plain_path)]


class PendingRecords(BaseModel):
    """Where a run's records go, and the two rows, as the pending transcript holds them."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    generation_id: Annotated[str, Field(pattern=f"^{GENERATION_ID_PATTERN}$")]
    transcript: _Path
    image: _Path
    upscaled: _Path | None = None
    manifest: _Path
    seq: Annotated[int, Field(ge=1)]
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


def lock_file(fd: int) -> None:
    """Hold an exclusive lock on ``fd`` until it is closed (the run log of a live run, so
    that :func:`runs_without_transcript` does not count it)."""
    _lock(fd, blocking=True)


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
    refused: str | None = None
    """Why the repair may not act on this pending transcript (see the module docstring): it
    is then only named, and nothing it names is looked at."""
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

    def refusal(self) -> str:
        """The one line that names a refused pending transcript and why."""
        return (
            f"refused {self.path}: {self.refused}; nothing was touched (a pending transcript "
            "may only name its own run's files in the folders the configuration writes)"
        )

    def describe(self, command: str) -> str:
        """One line: the run, what it left, what it lacks, and the command that repairs it
        (or, refused, :meth:`refusal`)."""
        if self.refused is not None:
            return self.refusal()
        lacks = self.missing()
        return (
            f"run {self.generation_id} was killed while writing its records: it left "
            + ", ".join(self.left())
            + (f"; missing: {', '.join(lacks)}" if lacks else "")
            + f"; repair it: {command}"
        )


@dataclass(frozen=True)
class RepairScope:
    """Where a run of the configuration writes, the only places its repair may act: the log
    folder (``image.log_path``: the pending transcript, the transcript), the images' folder
    (``image.generation_path``), the 4K images' (``upscale.output_path``, or the images'),
    the titles manifest and the generations CSV. Built from the configuration by
    :func:`image_project.run.records.repair_scope`."""

    log_dir: Path
    image_dir: Path
    upscale_dir: Path
    manifest: Path
    generations: Path
    config: Path | None = None
    """The configuration file these come from, when the repair command must name it (one
    file read, not the default choice's pair): the command then says ``--config``."""

    def problem(self, path: Path, where: PendingRecords | None) -> str | None:
        """Why the pending transcript at ``path`` (``where`` what it holds, None when it
        could not be read) may not be acted on, or None: it must be a regular file in the
        log folder named after a generation id, and every path it names the very file its
        run writes (:meth:`_own`)."""
        generation_id = path.name[: -len(PENDING_SUFFIX)]
        problem = generation_id_problem(generation_id)
        if problem is not None:
            return f"its name holds no generation id ({problem})"
        if _not_own(Path(os.path.abspath(path)), self.log_dir / path.name) is not None:
            return f"it is not in the log folder {self.log_dir} (image.log_path)"
        if where is None:
            return None
        if where.generation_id != generation_id:
            return f"it holds the records of run {where.generation_id!r}, not {generation_id!r}"
        wanted: list[tuple[str, str | None, Path, str]] = [
            (
                "transcript",
                where.transcript,
                self.log_dir / f"{generation_id}_transcript.json",
                "image.log_path",
            ),
            (
                "image",
                where.image,
                self.image_dir / f"{generation_id}_image.jpg",
                "image.generation_path",
            ),
            (
                "4K image",
                where.upscaled,
                self.upscale_dir / f"{generation_id}_image_4k.jpg",
                "upscale.output_path",
            ),
            ("manifest", where.manifest, self.manifest, "prompt.titles_manifest_path"),
            ("generations CSV", where.generations, self.generations, "prompt.generations_path"),
        ]
        for what, given, own, setting in wanted:
            why = None if given is None else _not_own(Path(given), own)
            if why is not None:
                return f"its {what} {given!r} {why} ({setting})"
        for what, row in (("manifest", where.manifest_row), ("generations", where.generations_row)):
            if row.get("generation_id") != generation_id:
                return f"its {what} row is not run {generation_id!r}'s"
        if where.manifest_row.get("seq") != str(where.seq):
            return f"its manifest row's seq is not its seq {where.seq}"
        return None


def _problem(scope: RepairScope | None, path: Path, where: PendingRecords | None) -> str | None:
    if scope is None:
        return "no configuration says which folders its run writes"
    return scope.problem(path, where)


def _not_own(given: Path, own: Path) -> str | None:
    """Why ``given`` is not the file ``own`` (None when it is): the same path once the
    folders are resolved (``own``'s folder may itself be a symlink the user made), with no
    ``..``, and not a symlink itself (which would lead to another file)."""
    try:
        if given.is_symlink():
            return "is a symlink"
        resolved = Path(os.path.realpath(given.parent)) / given.name
        plain = ".." not in given.parts and given.is_absolute()
        if plain and resolved == Path(os.path.realpath(own.parent)) / own.name:
            return None
    except (OSError, ValueError):
        pass
    return f"is not {own}"


def left_by_killed_runs(folder: Path, scope: RepairScope | None) -> list[Leftover]:
    """The pending transcripts in ``folder`` that no live run holds, inspected; those that
    ``scope`` refuses are returned with :attr:`Leftover.refused` set, uninspected (None: no
    configuration says where runs write, so every one is refused)."""
    try:
        paths = sorted(folder.glob("*" + PENDING_SUFFIX))
    except OSError:
        return []
    found = []
    for path in paths:
        if not _is_regular(path):
            gid = path.name[: -len(PENDING_SUFFIX)]
            found.append(Leftover(path, gid, None, "not a regular file"))
        elif not _is_held(path):
            found.append(_inspect(path, scope))
    return found


def _is_regular(path: Path) -> bool:
    """A regular file, not a symlink (a FIFO would block its reader; a symlink leads to
    another file)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _inspect(path: Path, scope: RepairScope | None) -> Leftover:
    generation_id = path.name[: -len(PENDING_SUFFIX)]
    refused = _problem(scope, path, None)
    if refused is not None:
        return Leftover(path, generation_id, None, refused)
    try:
        pending: _PendingFile | None = _PendingFile.model_validate_json(path.read_bytes())
    except OSError:
        pending = None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] != "json_invalid":  # JSON, but not a pending transcript
            loc = ".".join(str(p) for p in first["loc"])
            return Leftover(
                path, generation_id, None, f"not a pending transcript ({loc}: {first['msg']})"
            )
        pending = None
    if pending is None:
        return Leftover(path, generation_id, None)
    refused = _problem(scope, path, pending.pending_records)
    if refused is not None:
        return Leftover(path, generation_id, None, refused)
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
    """What :func:`repair` did: ``outcome`` ``completed``, ``rolled_back``, ``removed``
    (a pending transcript cut short: nothing after it was written) or ``refused``
    (:attr:`Leftover.refused`: nothing done), and a line saying so."""

    generation_id: str
    outcome: str
    line: str
    transcript: Path | None


def repair(leftover: Leftover, scope: RepairScope | None) -> Repaired:
    """Complete or roll back the run ``leftover`` describes (see the module docstring), under
    the manifest lock, and remove its pending transcript; the transcript it writes is then
    imported like any other. A pending transcript ``scope`` refuses (checked again here) is
    left as it is, and so is everything it names."""
    gid = leftover.generation_id
    refused = leftover.refused or _problem(
        scope, leftover.path, leftover.pending.pending_records if leftover.pending else None
    )
    if refused is not None:
        return Repaired(gid, "refused", replace(leftover, refused=refused).refusal(), None)
    if leftover.pending is None:
        leftover.path.unlink(missing_ok=True)
        return Repaired(
            gid, "removed", f"{gid}: removed {leftover.path}, cut short (nothing after it)", None
        )
    where = leftover.pending.pending_records
    with manifest_lock(Path(where.manifest)):
        leftover = _inspect(leftover.path, scope)  # as it is now, under the lock
        if leftover.pending is None:  # changed since it was first read
            changed = replace(leftover, refused=leftover.refused or "it changed meanwhile")
            return Repaired(gid, "refused", changed.refusal(), None)
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


def describe_all(folder: Path, command: str, scope: RepairScope | None) -> list[str]:
    """One line per run killed in its records phase whose leftovers are in ``folder`` (or
    per pending transcript refused)."""
    return [leftover.describe(command) for leftover in left_by_killed_runs(folder, scope)]


# --------------------------------------------------------------------------- no transcript


def runs_without_transcript(folder: Path) -> list[str]:
    """The runs whose log ``<id>.log`` is in ``folder`` with neither a transcript nor a
    pending transcript beside it, and that no live run holds (a run holds its log while it
    lives): runs that ended without writing their transcript (a full disk, or the process
    killed before its records phase). Sorted, oldest id first."""
    try:
        logs = sorted(folder.glob("*.log"))
    except OSError:
        return []
    found = []
    for log in logs:
        gid = log.stem
        if generation_id_problem(gid) is not None or not _is_regular(log):
            continue
        beside = (folder / f"{gid}_transcript.json", folder / f"{gid}{PENDING_SUFFIX}")
        if any(p.exists() for p in beside) or _is_held(log):
            continue
        found.append(gid)
    return found


def describe_without_transcript(
    folder: Path, ids: list[str], stored: set[str] | None = None
) -> str:
    """One line naming the runs :func:`runs_without_transcript` found (at most three by id)
    and, when ``stored`` (the store's ids) is known, which of them the store has."""
    shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    line = (
        f"{len(ids)} run(s) in {folder} have a log but no transcript ({shown}): the transcript "
        "could not be written (a full disk?) or the process was killed before its records"
    )
    if stored is None:
        return line + "; runs list says which of them the store has"
    kept = sum(1 for gid in ids if gid in stored)
    return line + (
        f"; {kept} of them in the store (runs show ID), {len(ids) - kept} recorded nowhere "
        "but in their log <id>.log"
    )
