"""image_project command line: ``python main.py --help``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from image_project.cli import main

if __name__ == "__main__":
    sys.exit(main(root=Path(__file__).resolve().parent))
