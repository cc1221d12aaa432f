"""The filesystem gateway: a small MCP server a person runs on their own machine
(`instance-ai gateway`). It serves the files under one root and connects *out* to the
service, which calls its tools for that person's threads. Imports nothing from `server/`."""

__all__: list[str] = []
