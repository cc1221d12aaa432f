"""Tools from outside the service, over MCP: the deployment's MCP servers (`servers`), and
the filesystem gateways people run on their own machines (`gateway`)."""

__all__: list[str] = []
