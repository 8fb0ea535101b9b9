"""Context injectors: lines of guidance from the run's date and the user's own plugins
(docs/context.md).

* :mod:`.base` — the :class:`Injector` protocol a plugin implements, its input and answer,
  the guidance block;
* :mod:`.season`, :mod:`.holiday` — the built-in injectors;
* :mod:`.loading` — the run's injectors from ``context.*``, plugins imported and checked
  before any model call;
* :mod:`.inject` — one run's context record.

Where the guidance goes (``context.injection_location``) is the prompt stages' business
(:class:`image_project.stages.standard.Guidance`); judges never get it.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""
