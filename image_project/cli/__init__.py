"""The command line: its arguments and exit codes (:mod:`.command`), the start of every way in
(:mod:`.launch`), the ``runs`` and ``review`` commands over the store (:mod:`.runs`), and what
the terminal shows: live progress (:mod:`.progress`, which the run driver reports to) and the
run summary (:mod:`.summary`).

This ``__init__`` imports nothing: :mod:`.progress` and :mod:`.summary` sit in lower layers
than the commands (tests/test_architecture.py) and are imported without loading the rest.
"""
