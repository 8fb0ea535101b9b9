"""``python bench/quality.py [flags]``: the selection-quality bench (the package bench/quality/;
``--help`` lists the flags, docs/evidence.md what it measures).

Run as a script, bench/ is ``sys.path[0]``, and ``import quality`` finds the package beside
this file (a directory with an ``__init__.py`` comes before a module of the same name).
"""

import sys

from quality import main

if __name__ == "__main__":
    sys.exit(main())
