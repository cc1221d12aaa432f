"""Workflows, executions, credentials, data tables and the rest of what n8n holds."""

__all__: list[str] = []
