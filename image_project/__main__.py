"""``python -m image_project [generate] [options]``: the ``image-project`` command line.
``config/`` is read from the current directory, as by the console script. It starts through
:func:`image_project.cli.launch.launch`, so that a Ctrl-C during start-up exits 130 without a
traceback."""

import sys

from image_project.cli.launch import launch

if __name__ == "__main__":
    sys.exit(launch(prog="python -m image_project"))
