"""Build, validate, simulate and verify workflows; the workflow loop."""
