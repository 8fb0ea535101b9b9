"""image_project: art concepts and a taste profile to a captioned image through a concurrent,
audited LLM prompt pipeline. The API lives in the subpackages and modules (``cli.main`` is the
command line); the package itself exports nothing."""

__all__: list[str] = []
