"""`instance-ai`, the command line: gRPC clients of the service (chat, build, verify, tools,
events, health, eval), and the commands that run or administer it on its own machine (serve,
sandbox, credentials). `client.py` and `common.py` are shared with the evaluation runner."""

__all__: list[str] = []
