"""Batch evaluation jobs: many build → verify cases, each in its own thread (and sandbox),
spread over one or more servers, scored and reported. A client of the public gRPC contract
only: it imports the generated stubs and the client helpers (`instance_ai_client`), never the
service's internals nor the command line (which mounts `instance-ai eval` from here)."""

__all__: list[str] = []
