"""The async engine: SQLite (embedded default) or PostgreSQL, migrated to head at open."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, event, exc, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from server.errors import UnavailableError

__all__ = ["MIGRATIONS_DIR", "Database", "storage_failure"]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# The advisory lock the migrations run under on PostgreSQL (any fixed 64-bit number).
_MIGRATION_LOCK = 0x1A5E_A1_0001
log = structlog.get_logger(__name__)


class Database:
    """Owns the engine and the session factory. Use `await Database.open(url)`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions = async_sessionmaker(engine, expire_on_commit=False)
        self.is_sqlite = engine.dialect.name == "sqlite"

    @classmethod
    async def open(cls, url: str) -> Database:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database:
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, **_engine_options(url))
        if engine.dialect.name == "sqlite":
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        else:
            event.listen(engine.sync_engine, "do_connect", _connect_or_operational_error)
        db = cls(engine)
        lock = (
            Path(f"{parsed.database}.migrate.lock")
            if engine.dialect.name == "sqlite" and parsed.database not in (None, "", ":memory:")
            else None
        )
        await db.migrate(lock)
        return db

    async def migrate(self, sqlite_lock: Path | None = None) -> None:
        """Apply every Alembic migration not yet applied (idempotent). Processes starting
        together on one database take turns — on PostgreSQL under a transaction-scoped
        advisory lock, on SQLite under a lock file beside the database — so the first one
        migrates and the others find nothing to do."""
        with _file_lock(sqlite_lock):
            async with self.engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK}
                    )
                await conn.run_sync(_upgrade_to_head)
        log.info("database migrated", backend=self.engine.dialect.name)

    def session(self) -> AsyncSession:
        return self.sessions()

    async def close(self) -> None:
        await self.engine.dispose()


@contextlib.contextmanager
def _file_lock(path: Path | None) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) while the block runs; no-op for None.
    Held only while migrating at start-up, so blocking the loop for it is harmless."""
    if path is None:
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _engine_options(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        # SQLite takes one writer at a time; waiting beats failing with "database is locked".
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True}


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    # WAL lets readers (replays) run beside the writer; FULL sync makes a committed event
    # survive power loss, so an id a client has seen is never handed out again.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _connect_or_operational_error(
    dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]
) -> Any:
    """Connect as SQLAlchemy would, but a server that cannot be reached (the driver raises
    the socket's own OSError) is the driver's OperationalError, which SQLAlchemy wraps like
    any database error: callers then get UNAVAILABLE (`storage_failure`), not INTERNAL."""
    dbapi = dialect.loaded_dbapi
    try:
        return dbapi.connect(*cargs, **cparams)
    except (OSError, TimeoutError) as exc:
        raise dbapi.OperationalError(f"cannot connect to the database server: {exc}") from exc


def _upgrade_to_head(connection: Connection) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def storage_failure(error: BaseException) -> UnavailableError | None:
    """The caller's view of a database that cannot be read or written (disk full, a
    read-only file, the server gone): UNAVAILABLE with what to check. Only the driver's own
    words are kept, never the statement or its parameters."""
    if not isinstance(error, exc.OperationalError | exc.InterfaceError):
        return None
    reason = str(error.orig) if error.orig is not None else type(error).__name__
    return UnavailableError(
        f"the database cannot be used right now ({reason[:200]}); check the data "
        "directory's free space and permissions, or the database server, then try again"
    )
