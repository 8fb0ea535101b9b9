"""The step engine: chat calls, image calls and actions run from code on a scope, concurrently
where the code gathers them and recorded in declared order. Knows nothing of art, OpenAI or
files.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice."""
