"""The prompt stages: what a run asks the models, in what order.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice."""
