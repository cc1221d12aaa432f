"""instance-ai: the gRPC service behind the n8n workflow-building assistant."""

__all__: list[str] = []
