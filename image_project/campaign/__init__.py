"""A campaign: runs queued in the store's PostgreSQL and made by workers on any number of
machines (docs/batches.md, "Across machines").

* :mod:`.queue`: ``campaign submit`` and ``campaign status`` (procrastinate's job tables);
* :mod:`.worker`: ``image-project worker``, which takes runs and writes them to the store;
* :mod:`.limiter`: the key's request budget, shared by every worker (pyrate-limiter's
  PostgreSQL bucket), which each worker's pacer spends.

Its libraries come with the ``campaign`` extra (``pip install 'image_project[campaign]'``);
:func:`~.queue.require_campaign` says so when they are missing, and when the store is not
PostgreSQL. Nothing here is imported by a batch on one machine.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""
