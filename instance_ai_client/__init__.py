"""What every client of the running service shares, below both `instance_ai_cli` (the
command line) and `evals` (batch evaluations), so neither imports the other for it:
`connection.py` (the target, TLS and API key: a channel and call metadata) and `terminal.py`
(consoles, exit codes, the shared command options, JSON lines, and errors a person can act
on). It imports nothing of `server`, `evals` or `instance_ai_cli`."""

__all__: list[str] = []
