"""What goes inside a sandbox, and how its image is built without an image registry."""

__all__: list[str] = []
