"""``python main.py [generate] [options]``: the ``image-project`` command line, run from a
checkout. ``config/`` is read next to this file, wherever it is run from (the console script
``image-project`` and ``python -m image_project`` read it from the current directory).
Python puts this file's directory on ``sys.path``, so the checkout's ``image_project`` is
imported without installing it. It starts through :func:`image_project.cli.launch.launch`, so that
a Ctrl-C during start-up exits 130 without a traceback."""

import sys
from pathlib import Path

from image_project.cli.launch import launch

if __name__ == "__main__":
    sys.exit(launch(root=Path(__file__).resolve().parent, prog="python main.py"))
