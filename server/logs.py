"""Structured logging: human-readable console lines, or one JSON object a line (`json`).

Everything (our code, grpc, alembic) goes through the standard library's root logger with a
structlog formatter, so a machine reading `--log-format json` sees one format.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

__all__ = ["LogFormat", "configure_logging"]

LogFormat = Literal["console", "json"]


def configure_logging(*, log_format: LogFormat = "console", level: str = "info") -> None:
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(),
            # Python's own traceback format: never the frames' local variables (a decrypted
            # credential, a key or a token held in a local must not reach the log), and cheap
            # (rich's highlighted tracebacks took seconds each, on the event loop).
            exception_formatter=structlog.dev.plain_traceback,
        )
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                # The console renderer prints tracebacks itself; JSON needs them as a field.
                *([structlog.processors.format_exc_info] if log_format == "json" else []),
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The SQL engine logs every statement at INFO when asked; keep it at WARNING.
    logging.getLogger("sqlalchemy").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
