"""The sandboxes' runtime: gVisor (runsc) by default where the engine has it, runc where it
has not (with a warning), and a sandbox made under another runtime made again under the one
chosen now, its workspace kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from sandbox.docker_engine import DockerEngine
from sandbox.errors import SandboxUnavailableError
from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider
from sandbox.runtimes import AUTO, RUNC, RUNSC, choose_runtime
from server.errors import UnavailableError
from server.settings import Settings
from tests.conftest import serving
from tests.test_docker_hosts import Client


def test_auto_takes_gvisor_where_registered_and_says_so_where_not() -> None:
    assert choose_runtime(AUTO, {RUNC, RUNSC}).name == RUNSC
    assert choose_runtime(AUTO, {RUNC, RUNSC}).warning is None
    fallback = choose_runtime(AUTO, {RUNC}, "tcp://builder:2376")
    assert fallback.name == RUNC
    assert fallback.warning is not None
    assert "'tcp://builder:2376' has no gVisor" in fallback.warning
    assert "INSTANCE_AI_SANDBOX_RUNTIME=runc" in fallback.warning  # how to choose it knowingly
    assert choose_runtime(RUNC, {RUNC, RUNSC}) == choose_runtime(RUNC, {RUNC})
    with pytest.raises(SandboxUnavailableError, match=r"no runtime named runsc.*install-runsc"):
        choose_runtime(RUNSC, {RUNC})


def test_this_machines_engine_runs_sandboxes_under_gvisor_by_default(
    docker_engine: DockerEngine,
) -> None:
    # `make setup` installed runsc and registered it (scripts/install-runsc).
    assert RUNSC in docker_engine.runtimes()
    default = Settings.model_fields["sandbox_runtime"].default
    assert default == AUTO
    assert choose_runtime(default, docker_engine.runtimes()).name == RUNSC


@pytest.mark.parametrize(("before", "after"), [(RUNC, RUNSC), (RUNSC, RUNC)])
async def test_a_sandbox_of_another_runtime_is_made_again_with_its_workspace(
    provider: SandboxProvider, before: str, after: str
) -> None:
    def under(runtime: str) -> SandboxManager:
        limits = dataclasses.replace(provider.limits, runtime=runtime)
        return SandboxManager(
            SandboxProvider(
                provider.engine, image=provider.image, owner=provider.owner, limits=limits
            )
        )

    first = under(before)
    await first.write_file("t1", "notes.md", b"kept")
    made = await first.acquire("t1")
    assert made.runtime == before
    await first.close()

    second = under(after)
    remade = await second.acquire("t1")
    assert remade.id != made.id and remade.runtime == after
    assert await second.read_file("t1", "notes.md") == b"kept"
    uname = await second.run_command("t1", "cat /proc/version", timeout_s=30)
    assert ("4.4.0" in uname.stdout) == (after == RUNSC)  # gVisor's kernel answers, or the host's
    await second.close()


async def test_runsc_asked_for_on_an_engine_without_it_is_unavailable_saying_what_to_do(
    make_docker_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    # This engine has runsc; one that has not answers its runtimes without it.
    monkeypatch.setattr(DockerEngine, "runtimes", lambda self: frozenset({RUNC}))
    settings = make_docker_settings(sandbox_runtime=RUNSC)
    async with serving(settings) as (app, channel):
        engines = await Client(channel).engines()
        assert engines == {"default": "NOT_SERVING"}
        with pytest.raises(UnavailableError, match="no runtime named runsc"):
            await app.parts.sandboxes.for_thread("any")
