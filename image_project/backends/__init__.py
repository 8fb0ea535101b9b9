"""Model backends: the protocols (``base``), the OpenAI adapter and its retry policy, the
offline backend, and the factory that picks one. Import from those modules; the package
itself exports nothing.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice."""
