"""Strict configuration: pydantic models, YAML loading, ``--set`` overrides.

Its modules, each imported by name (this ``__init__`` imports nothing):

* :mod:`image_project.config.models`: the frozen pydantic models (:class:`AppConfig` and its
  sections), their validators, :data:`StrictBool`, :func:`parse_strict_bool` and the bounds
  every number and string is held to.
* :mod:`image_project.config.loading`: :func:`load_config` (file choice, YAML, the local
  overlay via :func:`deep_merge`, ``--set`` overrides) and the translation of every
  validation problem into ONE :class:`~image_project.errors.ConfigError` naming the full
  dotted key.

:mod:`image_project.config.capabilities` holds the
table of what each known OpenAI model accepts and :func:`~image_project.config.capabilities.check_models`,
which the backend factory applies before any model call (``docs/models.md``).
:mod:`image_project.config.store_url` holds what a ``store.url`` may be,
:mod:`image_project.config.defaults` the built-in defaults (package data) and ``init``, and
:mod:`image_project.config.dependencies` the keys that only matter while another key opens
them, which :func:`load_config` checks.

Each module's docstring states its part of the contract.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""
