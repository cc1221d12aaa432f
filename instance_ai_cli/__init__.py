"""`instance-ai`, the command line: gRPC clients of the service (chat, build, verify, tools,
events, health, eval), and the commands that run or administer it on its own machine (serve,
sandbox, credentials). What it shares with the evaluation runner is `instance_ai_client`."""

__all__: list[str] = []
