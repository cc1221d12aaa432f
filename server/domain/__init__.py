"""Workflows, executions, credentials, data tables and the rest of what n8n holds."""
