"""The user's n8n as the instance: the instance seam (`server/instance/`) over n8n's public
REST API, beside the service's own records of what n8n has no place for."""

__all__: list[str] = []
