"""Build, validate, simulate and verify workflows; the workflow loop."""

__all__: list[str] = []
