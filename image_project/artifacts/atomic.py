"""Durable file writes: whole files replaced atomically, records appended in one write.

*Nothing half-written*: :func:`atomic_write_bytes` writes a temporary file in the target's own
directory (so the final :func:`os.replace` never crosses a filesystem), flushes and fsyncs
it, then renames it over the target. A reader sees the old file or the new one, never a
prefix, and a run killed mid-write leaves at worst a ``.<name>.*.tmp`` file behind, never a
truncated target. On any failure the temporary file is removed and the old target is left
untouched.

*Nothing lost*: :func:`append_bytes` appends a record with a single ``write`` on a file
opened with ``O_APPEND`` and fsyncs it, so concurrent appenders never interleave inside one
record and an acknowledged record survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

_BINARY = getattr(os, "O_BINARY", 0)


def _fsync_dir(directory: Path) -> None:
    """Persist a rename in ``directory`` (POSIX only; best effort)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _create_temp(target: Path) -> tuple[int, Path]:
    """A new, exclusively created temp file next to ``target`` (mode follows the umask)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a unique temporary file next to {target}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically; parent directories are created.

    Returns the target path. On failure the previous content (if any) is intact and no
    temporary file remains.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(target)
    try:
        try:
            _write_all(fd, bytes(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``text`` atomically (encoded as given; newlines are not translated)."""
    return atomic_write_bytes(path, text.encode(encoding))


def append_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Append ``data`` to ``path`` with one ``write`` in append mode, then fsync.

    The file (and its parent directories) are created when missing. Appending is atomic
    with respect to other appenders of the same file on local filesystems; callers that
    must also decide *what* to append from the file's current state (a CSV header, a
    sequence number) must hold a lock around the read-decide-append sequence.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _BINARY, 0o666)
    try:
        _write_all(fd, bytes(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def file_size(path: str | os.PathLike[str]) -> int | None:
    """The size of ``path`` in bytes, or ``None`` when it does not exist."""
    try:
        return Path(path).stat().st_size
    except FileNotFoundError:
        return None


def truncate_back(path: str | os.PathLike[str], size: int | None) -> None:
    """Undo appends made since :func:`file_size` returned ``size`` (``None``: remove the file).

    Only for a caller that has held the file's lock since it took ``size``, so that the bytes
    cut off are its own.
    """
    target = Path(path)
    if size is None:
        target.unlink(missing_ok=True)
        return
    fd = os.open(target, os.O_WRONLY | _BINARY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
