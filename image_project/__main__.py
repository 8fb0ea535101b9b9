"""``python -m image_project [generate] [options]``: the ``image-project`` command line.
``config/`` is read from the current directory, as by the console script."""

import sys

from image_project.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m image_project"))
