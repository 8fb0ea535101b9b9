"""The built-in defaults shipped inside the package, and ``image-project init``.

``image_project/defaults/`` holds the one source of the default ``config.yaml`` (every key,
documented), ``categories.csv``, ``profile.csv`` and the example judge panel
``scoring_ensemble.example.yaml``; the checkout's ``config/`` files of the same names are
symbolic links to them (tests/test_defaults.py keeps them links). They are package data, so
an installed ``image-project`` has them wherever it runs:

* :func:`~image_project.config.loading.load_config` falls back to :data:`BUILTIN_CONFIG` when
  there is no ``config/config.yaml`` in the directory it runs in (and no ``--config`` or
  ``$IMAGE_PROJECT_CONFIG``); the categories and profile then come from this directory too,
  everything else relative (the outputs) from the current directory.
* :func:`write_starter` (:func:`init_command`: ``image-project init [DIR]``) copies the four
  files into ``DIR/config/`` for the user to edit, read through :mod:`importlib.resources`
  (the package's own data, wherever and however it is installed); it never overwrites a file
  unless told to. What the files and init's closing line point to is a file init writes, one
  a run writes, or a URL (tests/test_wheel.py).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "defaults"
BUILTIN_CONFIG = BUILTIN_DIR / "config.yaml"
BUILTIN_INPUTS: dict[str, Path] = {
    "categories_path": BUILTIN_DIR / "categories.csv",
    "profile_path": BUILTIN_DIR / "profile.csv",
}
"""The ``prompt`` keys that point at the shipped input files when the built-in config is used."""

EXAMPLE_PANEL = "scoring_ensemble.example.yaml"
STARTER_FILES = ("config.yaml", "categories.csv", "profile.csv", EXAMPLE_PANEL)
"""What ``init`` writes into ``DIR/config/``."""


class StarterExistsError(FileExistsError):
    """``init`` would overwrite files (``paths``) and was not told to (``--force``)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        super().__init__(", ".join(map(str, paths)))


def write_starter(directory: Path, *, force: bool = False) -> list[Path]:
    """Copy the shipped config and input files into ``directory/config/``; the paths written.

    Raises :class:`StarterExistsError` naming every file that exists, before writing any,
    unless ``force``; ``OSError`` when the directory cannot be written.
    """
    target = directory / "config"
    paths = [target / name for name in STARTER_FILES]
    existing = [path for path in paths if path.exists()]
    if existing and not force:
        raise StarterExistsError(existing)
    target.mkdir(parents=True, exist_ok=True)
    from importlib.resources import files  # here, not at start-up: only init reads them so

    shipped = files("image_project").joinpath("defaults")
    for name, path in zip(STARTER_FILES, paths, strict=True):
        path.write_bytes(shipped.joinpath(name).read_bytes())
    return paths


def init_command(directory: Path, *, force: bool = False, prog: str = "image-project") -> int:
    """``image-project init [DIR] [--force]``: :func:`write_starter`, then say what was written
    and the next command. Exit status 0, or 2 (nothing written) when a file exists (without
    ``force``) or the directory cannot be written."""
    try:
        written = write_starter(directory, force=force)
    except StarterExistsError as exc:
        names = ", ".join(map(str, exc.paths))
        print(f"init: not overwriting {names} (--force replaces them)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"init: cannot write {directory / 'config'}: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    here = directory.resolve() == Path.cwd().resolve()
    cd = "" if here else f"cd {shlex.quote(str(directory))} && "
    print(
        f"Next: {cd}{prog} --prompt-only   (a prompt, no image; then {prog} for the image).\n"
        f"A judge panel: {prog} --config config/{EXAMPLE_PANEL}\n"
        "Edit config/config.yaml to choose models (backend.text_model, image.model)."
    )
    return 0


def builtin_note(root: Path, prog: str) -> str:
    """The line the CLI prints (on stderr) when it runs on the built-in defaults."""
    return (
        f"No config/config.yaml in {root}: using the built-in defaults (outputs under {root}; "
        f"'{prog} init' writes a config to edit)."
    )
