"""Start the command line so that Ctrl-C during start-up is a clean exit.

Importing the command line (pydantic models, anyio, YAML) takes about 0.2 s, and reading
the configuration and making the backends follow; only then does
:func:`image_project.cli.command.main` take over the signals. A Ctrl-C in that window would print a
long traceback out of whatever module was being imported. The three ways in (``main.py``,
``python -m image_project`` and the ``image-project`` console script) therefore start through
:func:`launch`, which imports the command line itself: an interrupt before the runs begin
prints one line and exits 130, with nothing run and nothing written. This module imports
nothing heavy, so the window before it is the interpreter's own start-up (milliseconds).

The garbage collector is off while the command line is imported, and what the imports made
is then frozen (:func:`gc.freeze`): modules, classes and pydantic's schemas live as long as
the process, so collecting them is wasted work, done many times during the imports and once
more over all of them at exit (about 0.06 s of a 0.3 s prompt-only run, ``bench/startup.py``).
Everything a run makes is collected as usual.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path

_EXIT_INTERRUPTED = 130  # 128 + SIGINT, as image_project.cli.command.EXIT_INTERRUPTED
_EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: standard output's reader closed the pipe


def launch(*, prog: str, root: Path | None = None) -> int:
    """Import and run :func:`image_project.cli.command.main` with ``sys.argv``; a KeyboardInterrupt
    that escapes it (one during start-up: once the runs have begun, ``main`` handles the
    signals itself) is reported on one line and exits 130."""
    try:
        main = _import_main()
        code: int = main(root=root, prog=prog)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except KeyboardInterrupt:
        print("\ninterrupted (SIGINT)", file=sys.stderr)
        return _EXIT_INTERRUPTED
    except BrokenPipeError:
        return _closed_stdout()


def _closed_stdout() -> int:
    """The reader of standard output went away (``image-project runs export | head -1``): stop
    quietly, as a command killed by SIGPIPE does, with its exit status 141 (128 + SIGPIPE).
    Standard output is pointed at /dev/null first, so the interpreter's final flush of what
    is still buffered cannot raise again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return _EXIT_BROKEN_PIPE


def _import_main() -> Callable[..., int]:
    """:func:`image_project.cli.command.main`, imported with the collector off and its objects frozen
    the first time (a later call, in a process that embeds :func:`launch`, freezes nothing
    more: what it made since is that process's to collect)."""
    if "image_project.cli.command" in sys.modules:
        from image_project.cli.command import main

        return main
    enabled = gc.isenabled()
    gc.disable()
    try:
        from image_project.cli.command import main
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
    return main


def console_script() -> int:
    """The ``image-project`` console script."""
    return launch(prog="image-project")
