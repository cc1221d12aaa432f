"""The agent's tools: one module per group; each tool is a `ToolSpec`."""

__all__: list[str] = []
