"""n8n's editor in front of the service: the `/rest/instance-ai` bridge. A client of the
public gRPC contract only (the generated stubs and `instance_ai_client`), never of the
service's internals; the command line mounts `instance-ai n8n-bridge` from here."""

__all__: list[str] = []
