"""What every layer of the server may import: who is calling, generated ids, and the rules
for values callers send. Nothing here imports another part of the server but its errors."""

__all__: list[str] = []
