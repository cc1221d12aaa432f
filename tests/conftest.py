"""Shared fixtures: real servers on free loopback ports, real stubs, real databases."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from instance_ai.v1 import agent_pb2_grpc
from server.app import Application
from server.settings import Settings, load_settings
from tests.agent_fixtures import STREAMED
from tests.event_contract import invalid_events
from tests.postgres import new_postgres_database, postgres_cluster
from tests.run_shared import begin_run, end_run
from tests.sandbox_api_fixtures import n8n_assistant, sandbox_api
from tests.sandbox_fixtures import (
    docker_client,
    docker_engine,
    owner,
    provider,
    runsc_engine,
    sandbox_image,
    sandbox_limits,
)
from tests.scheduling import UnitScheduling, longest_first

# Session fixtures are defined here once: a module that imports one gets its own instance.
__all__ = [
    "docker_client",
    "docker_engine",
    "n8n_assistant",
    "owner",
    "provider",
    "runsc_engine",
    "sandbox_api",
    "sandbox_image",
    "sandbox_limits",
]  # fixtures, shared


def pytest_configure(config: pytest.Config) -> None:
    begin_run()  # servers the run's workers share (tests/run_shared.py)


def pytest_unconfigure(config: pytest.Config) -> None:
    end_run()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: tests/scheduling.py
        longest_first(items)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> UnitScheduling:
    return UnitScheduling(config, log)


# Events checked against n8n's contract, per test (reported at the end of the run).
VALIDATED: dict[str, int] = {}


@pytest.fixture(autouse=True)
def events_keep_n8ns_contract(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every event a test's conversations streamed (tests/agent_fixtures.Chat) passes n8n's
    event contract; the test fails with each refused event's type and the schema's words."""
    STREAMED.clear()
    yield
    streamed, seen = list(STREAMED), len(STREAMED)
    STREAMED.clear()
    if streamed:
        refused = invalid_events(streamed)
        assert not refused, f"{len(refused)} of {seen} events break n8n's contract: " + "; ".join(
            f"{r['type']} {r['issues']} in {r['event']}" for r in refused[:5]
        )
        VALIDATED[request.node.nodeid] = seen


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its counts go to the controller
        workeroutput["validated"] = dict(VALIDATED)


def pytest_testnodedown(node: Any) -> None:
    """A worker is done (in xdist's controller): its contract counts join the run's."""
    VALIDATED.update(getattr(node, "workeroutput", {}).get("validated", {}))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """How many events passed n8n's contract, in how many tests; the count per test is kept
    in pytest's cache (`pytest --cache-show instance-ai/event-contract`)."""
    if VALIDATED:
        terminalreporter.write_line(
            f"n8n's event contract (@n8n/api-types): {sum(VALIDATED.values())} events "
            f"validated in {len(VALIDATED)} tests"
        )
        if getattr(config, "cache", None) is not None:
            config.cache.set("instance-ai/event-contract", VALIDATED)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_cluster() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each supported kind."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"
    return await new_postgres_database(request.getfixturevalue("postgres_url"))


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        # Sandboxes only where a test asks for them (tests/test_workspace_api.py).
        values: dict[str, Any] = {
            "port": 0,
            "data_dir": tmp_path / "data",
            "sandbox_provider": "none",
        }
        values.update(overrides)
        return load_settings(**values)

    return make


@pytest.fixture
def make_docker_settings(
    make_settings: Callable[..., Settings], owner: str, sandbox_image: object
) -> Callable[..., Settings]:
    """Settings for a server with real Docker sandboxes under this test's owner label (no
    warm pool: tests create what they use)."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "sandbox_provider": "docker",
            "sandbox_owner": owner,
            "sandbox_pool_size": 0,
        }
        return make_settings(**(values | overrides))

    return make


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[Application, grpc.aio.Channel]]:
    """A running server and a plain channel to it over loopback."""
    async with (
        Application(settings) as application,
        grpc.aio.insecure_channel(f"127.0.0.1:{application.port}") as chan,
    ):
        yield application, chan


@pytest.fixture
async def app(make_settings: Callable[..., Settings]) -> AsyncIterator[Application]:
    async with Application(make_settings()) as application:
        yield application


@pytest.fixture
async def channel(app: Application) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as chan:
        yield chan


@pytest.fixture
def agent(channel: grpc.aio.Channel) -> agent_pb2_grpc.AgentStub:
    return agent_pb2_grpc.AgentStub(channel)
