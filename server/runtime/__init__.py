"""The conversation's state services: the durable per-thread event log, threads and runs,
the message history, HITL confirmations, plans, background tasks, and the thread's sandbox
(`sandboxes.py`). They sit beside `domain/`, below the pipeline and the tools; the
composition root (`server/wiring.py`) builds them."""

__all__: list[str] = []
