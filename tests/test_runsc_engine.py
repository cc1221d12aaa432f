"""The runsc engine (sandbox/runsc_engine.py): sandboxes under gVisor with runsc driven
directly. The seam's own calls are in test_engines.py (every engine); here, what the manager
gets from it (hardening seen from inside and from the host, builds and runs on the real n8n
packages, deadlines killing whole trees) and what only it can do: checkpoint and restore into
new containers."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from sandbox import identity
from sandbox.commands import JOB_UID_FIRST
from sandbox.docker_engine import connect
from sandbox.engine import (
    ContainerGoneError,
    ContainerInfo,
    ContainerSpec,
    JobLimits,
    SandboxLimits,
    TellsLeftovers,
)
from sandbox.errors import SandboxUnavailableError
from sandbox.image.build import BuiltImage
from sandbox.image.rootfs import APP_DIR, WORKSPACE
from sandbox.job_launcher import (
    LAUNCHER_DIR,
    LAUNCHER_LOCK,
    LAUNCHER_SOCKET_DIR,
    launcher_process,
)
from sandbox.kinds import THREAD
from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider
from sandbox.readiness import Readiness
from sandbox.runsc_cli import runs
from sandbox.runsc_engine import CGROUP_PARENT, RunscEngine
from sandbox.runsc_removals import kill_processes
from sandbox.runtimes import (
    GVISOR_HOST_PIDS_FACTOR,
    GVISOR_JOB_TASKS,
    GVISOR_KERNEL_MEMORY,
    RUNSC,
)
from sandbox.worker import worker_main_command
from sandbox.worker_socket import wait_for_worker
from sandbox.workspace_seed import MARKER, SEED_DIR, initialise
from tests.test_sandbox_owner import HOLD_LEASE

ORDER_ROUTER = "knowledge-base/templates/order-router.workflow.ts"
CGROUPS = Path("/sys/fs/cgroup")
GVISOR = SandboxLimits(runtime=RUNSC)


@pytest.fixture
def runsc_provider(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage, owner: str
) -> SandboxProvider:
    return SandboxProvider(runsc_engine, image=sandbox_image.tag, owner=owner, limits=GVISOR)


# A main process whose state moves on: it writes the time to /tmp/tick 20 times a second.
TICKER = ["sh", "-c", "while :; do date +%s%N > /tmp/t; mv /tmp/t /tmp/tick; sleep 0.05; done"]


def new_container(
    engine: RunscEngine,
    image: str,
    owner: str,
    command: list[str] | None = None,
    volume_seed: str | None = None,
) -> ContainerInfo:
    """A container made straight through the engine, with a volume of its own (the owner's
    clean-up removes both)."""
    labels = {identity.LABEL_OWNER: owner}
    volume = identity.volume_name(owner, uuid.uuid4().hex)
    engine.create_volume(volume, labels)
    container = engine.create(
        ContainerSpec(
            name=f"runsc-{uuid.uuid4().hex[:8]}",
            image=image,
            labels=labels,
            limits=GVISOR,
            workspace_volume=volume,
            working_dir=WORKSPACE,
            command=command,
            volume_seed=volume_seed,
        )
    )
    return container


def run(engine: RunscEngine, container: ContainerInfo, script: str) -> str:
    result = engine.exec(container.id, ["sh", "-c", script], workdir=WORKSPACE)
    assert result.exit_code == 0, result
    return result.stdout.decode()


@pytest.mark.attack
def test_a_runsc_sandbox_is_hardened_inside_and_limited_on_the_host(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine
) -> None:
    container = runsc_provider.ensure("thread-hardening")
    info = runsc_provider.get("thread-hardening")
    assert info is not None and info.runtime == RUNSC and container.status == "running"
    inside = run(
        runsc_engine,
        container,
        "grep -E '^CapEff' /proc/self/status; id -u; "
        "grep 'Max processes' /proc/self/limits | tr -s ' ' | cut -d' ' -f3; "
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
        "touch /home/user/x 2>&1 || true; "
        "python3 -c 'import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'",
    )
    lines = inside.splitlines()
    assert lines[0] == "CapEff:\t0000000000000000"
    assert lines[1:3] == ["1000", "1024"]  # the sandbox user; nproc counted inside gVisor
    assert lines[3] == "lo"  # no network but loopback
    # The user's own home, outside the workspace: writable by permissions, not by the mount.
    assert "Read-only file system" in lines[4]
    assert lines[5] == "1"  # no-new-privileges
    # An init that reaps orphans, under it the job launcher, under that the worker (which a
    # checkpoint then holds with them).
    main = run(runsc_engine, container, "cat /proc/1/cmdline | tr '\\0' ' '").split()
    launcher = launcher_process("1000:1000", worker_main_command())["args"]
    assert main == ["/sbin/docker-init", "--", *launcher]
    run(runsc_engine, container, "echo kept > note.txt")
    # The host's cgroup holds the sandbox's kernel to the limits (a backstop above its own).
    cgroup = CGROUPS
    path = f"{CGROUP_PARENT.strip('/')}/{container.id}"
    memory = int((cgroup / "memory" / path / "memory.limit_in_bytes").read_text())
    assert memory == 1024**3 + GVISOR_KERNEL_MEMORY
    assert int((cgroup / "pids" / path / "pids.max").read_text()) == 512 * GVISOR_HOST_PIDS_FACTOR
    assert int((cgroup / "cpu" / path / "cpu.cfs_quota_us").read_text()) == 100_000


# Of a process: its uids, gids and groups, and its capabilities.
STATUS = "grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd)):' /proc/{pid}/status"


def status_of(listing: str) -> dict[str, str]:
    fields = (line.split(":", 1) for line in listing.splitlines() if ":" in line)
    return {key: " ".join(value.split()) for key, value in fields}


@pytest.mark.attack
def test_commands_are_started_by_the_job_launcher_with_nothing_of_its_privilege(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine
) -> None:
    """The launcher is root with CAP_SETUID and CAP_SETGID (0xc0) alone; what it starts has
    its own uid, group 1000, no capability, no_new_privs, and no way to the launcher."""
    container = runsc_provider.ensure("thread-launcher")
    job = JOB_UID_FIRST + 7
    script = STATUS.format(pid="$$") + "; echo parent $PPID"
    found = runsc_engine.exec(container.id, ["sh", "-c", script], workdir="/", job=job)
    assert found.exit_code == 0, found
    own = status_of(found.stdout.decode())
    assert own["Uid"] == f"{job} {job} {job} {job}" and own["Gid"] == "1000 1000 1000 1000"
    assert own["Groups"] == "1000"
    for kind in ("CapInh", "CapPrm", "CapEff"):
        assert own[kind] == "0000000000000000", kind
    # no_new_privs (gVisor's status leaves it out: prctl says; gVisor has no ambient
    # capabilities), and no way back to root or its group.
    escape = (
        "import ctypes, os\n"
        "print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))\n"  # PR_GET_NO_NEW_PRIVS
        "for attempt in (os.setuid, os.setgid, lambda _: os.setgroups([0])):\n"
        " try: attempt(0); print('done')\n"
        " except PermissionError: print('refused')"
    )
    tried = runsc_engine.exec(container.id, ["python3", "-c", escape], workdir="/", job=job)
    assert tried.stdout.decode().split() == ["1", "refused", "refused", "refused"], tried
    # Its parent is the launcher (a fork in the sandbox, not a `runsc exec`).
    parent = found.stdout.decode().split("parent ")[1].strip()
    command_line = run(runsc_engine, container, f"tr '\\0' ' ' < /proc/{parent}/cmdline")
    assert "launcher.py" in command_line
    held = status_of(run(runsc_engine, container, STATUS.format(pid=parent)))
    assert held["Uid"] == "0 0 0 0"
    assert held["CapEff"] == held["CapPrm"] == held["CapBnd"] == "00000000000000c0"
    # A command can neither reach the launcher's socket nor signal it, and the launcher
    # starts nothing as root.
    reach = f"ls {LAUNCHER_SOCKET_DIR} 2>&1; kill -0 {parent} 2>&1; :"
    reached = run(runsc_engine, container, reach)
    assert "Permission denied" in reached and "not permitted" in reached.lower(), reached
    as_root = runsc_engine.exec(container.id, ["id", "-u"], workdir="/", job=0)
    assert as_root.exit_code == 127 and as_root.stdout == b"", as_root
    assert b"a job runs as the sandbox user or above it" in as_root.stderr
    # Its helper, run by a command, has nothing to change a uid with.
    helper = f"{APP_DIR}/bin/as-job"
    for ids in (["1000", "1000"], ["0", "0"]):
        tried = runsc_engine.exec(
            container.id, [helper, *ids, "/", "-", "id", "-u"], workdir="/", job=job
        )
        assert tried.exit_code in (126, 127) and tried.stdout == b"", tried
    # A job stopped, then killed (as the job kill does) takes nothing else with it (in the
    # launcher's process group, the kernel hung up on the launcher and the worker: 3 in 5).
    for _ in range(3):
        sleeper = runsc_engine.exec_attached(
            container.id, ["sh", "-c", "echo begun; sleep 60"], workdir="/", job=job
        )
        assert next(iter(sleeper.frames()))[1] == b"begun\n"
        assert runsc_engine.kill_job(container.id, job)
        assert list(sleeper.frames()) == [] and sleeper.exit_code() == 137
        assert run(runsc_engine, container, "echo alive") == "alive\n"


def test_a_launched_job_has_its_own_process_limit_and_tells_what_it_left(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine
) -> None:
    """The launcher sets a job's RLIMIT_NPROC on the job's own process (the launcher, the
    worker and the next command keep the sandbox's), and says, as a command ends, how many
    processes of the job's uid it found still there."""
    container = runsc_provider.ensure("thread-job-limits")
    job = JOB_UID_FIRST + 11

    def launched(
        script: str, limits: JobLimits | None = None
    ) -> tuple[str, int | None, int | None]:
        attached = runsc_engine.exec_attached(
            container.id, ["sh", "-c", script], workdir="/", job=job, limits=limits
        )
        output = b"".join(data for _, data in attached.frames())
        assert isinstance(attached, TellsLeftovers)
        return output.decode(), attached.exit_code(), attached.processes_left()

    told, code, left = launched("ulimit -p; ulimit -Hp", JobLimits(processes=GVISOR_JOB_TASKS))
    assert (told.split(), code, left) == ([str(GVISOR_JOB_TASKS)] * 2, 0, 0)
    others = "grep -h 'Max processes' /proc/1/limits /proc/2/limits /proc/3/limits; ulimit -p"
    told, code, _ = launched(others)
    assert code == 0 and told.split()[-1] == "1024", told
    assert [line.split()[2:4] for line in told.splitlines()[:3]] == [["1024", "1024"]] * 3
    # A child left behind is counted (the runner then kills the job); the sandbox user's
    # own processes (the worker's) are not the job's.
    told, code, left = launched("setsid sleep 60 > /dev/null 2>&1 & echo started")
    assert (told, code, left) == ("started\n", 0, 1)
    assert runsc_engine.kill_job(container.id, job)
    assert launched("exit 3") == ("", 3, 0)


def test_a_command_that_ends_the_worker_is_told_its_exit_before_the_sandbox_ends(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine
) -> None:
    """The worker is the sandbox's life, and the launcher ends with it; a command that
    killed it ends beside it and still gets its exit code, not "the sandbox went away"."""
    for _ in range(3):
        container = runsc_provider.ensure("thread-worker-killed")
        killed = runsc_engine.exec(
            container.id, ["pkill", "-KILL", "-f", "^node /opt/app/bin/worker.mjs"], workdir="/"
        )
        assert killed.exit_code == 0, killed  # there was a worker, and the kill was told
        deadline = time.monotonic() + 10
        while (state := runsc_engine.inspect(container.id)) and state.status == "running":
            assert time.monotonic() < deadline, "the sandbox outlived its worker"
            time.sleep(0.05)


async def test_the_manager_builds_runs_and_cuts_off_commands_on_runsc(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine
) -> None:
    manager = SandboxManager(runsc_provider)
    try:
        built = await manager.toolchain("t1").compile(ORDER_ROUTER, timeout_s=20)
        assert built.ok, built
        ran = await manager.toolchain("t1").execute(
            built.workflow, execution_id="e1", pin_data=built.fixtures
        )
        assert ran.status == "success", ran
        assert ran.order[0] == "Start"
        assert ran.nodes["Start"]["outputs"][0]["count"] == 2
        # A deadline takes the whole tree, setsid escapees included; the sandbox lives on.
        started = time.monotonic()
        result = await manager.run_command(
            "t1",
            "setsid sh -c 'sleep 300' & nohup sleep 301 >/dev/null 2>&1 & echo up; wait",
            timeout_s=1.5,
        )
        assert result.timed_out and result.stdout == "up\n"
        assert time.monotonic() - started < 30
        container = await manager.acquire("t1")
        processes = run(runsc_engine, container, "ps -eo args=")
        assert "sleep 300" not in processes and "sleep 301" not in processes
        # Stopped from outside: the next call starts it again, with the same workspace.
        await manager.write_file("t1", "kept.txt", b"still here")
        runsc_engine.kill(container.id)
        assert runsc_engine.inspect(container.id).status == "exited"  # type: ignore[union-attr]
        assert await manager.read_file("t1", "kept.txt") == b"still here"
    finally:
        await manager.close()


async def test_a_warm_worker_comes_back_in_each_sandbox_restored_from_its_checkpoint(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine, tmp_path: Path
) -> None:
    """The worker is the sandbox's main process and holds nothing of the host's between two
    channels: a checkpoint of a warm one restores, compiler loaded, into new sandboxes that
    each work on their own workspace."""
    template = SandboxManager(runsc_provider)
    built = await template.toolchain("template").compile(ORDER_ROUTER, timeout_s=20)
    assert built.ok, built
    before = await template.operation("template", "stats")
    assert before["threads"]["compiler"] is True
    container = await template.acquire("template")
    await template.close()  # its channel ends: the worker waits for the next one
    runsc_engine.checkpoint(container.id, tmp_path / "warm", leave_running=True)

    clones = SandboxManager(runsc_provider)
    try:
        for thread in ("clone-1", "clone-2"):
            restored, _ = runsc_provider.ensure_started(thread, tmp_path / "warm")
            assert restored.status == "running"
            after = await clones.operation(thread, "stats")
            # The same process, its compiler still loaded, its clock running on.
            assert after["pid"] == before["pid"] and after["threads"]["compiler"] is True
            assert after["uptime"] > before["uptime"]
            # Its own workspace, seeded anew: the template's sources are there, its own file
            # is its alone, and it builds.
            await clones.write_file(thread, "mine.txt", thread.encode())
            rebuilt = await clones.toolchain(thread).compile(ORDER_ROUTER, timeout_s=20)
            assert rebuilt.ok and rebuilt.source_hash == built.source_hash
        assert await clones.read_file("clone-1", "mine.txt") == b"clone-1"
        assert await clones.read_file("clone-2", "mine.txt") == b"clone-2"
        listing, _cut = await clones.list_files("template")
        assert "mine.txt" not in {entry.path for entry in listing}
    finally:
        await clones.close()


# A run that draws randomness where workflows do: a UUID (n8n-nodes-base's Crypto node, through
# the `uuid` package), an expression's Math.random (the engine's realm) and a Code node's (a
# node:vm context of its own).
RANDOM_DRAWS = {
    "name": "draws",
    "nodes": [
        {"name": "Start", "type": "n8n-nodes-base.manualTrigger", "typeVersion": 1,
         "position": [0, 0], "parameters": {}},
        {"name": "Id", "type": "n8n-nodes-base.crypto", "typeVersion": 2, "position": [200, 0],
         "parameters": {"action": "generate", "encodingType": "uuid", "dataPropertyName": "id"}},
        {"name": "Roll", "type": "n8n-nodes-base.set", "typeVersion": 3.4, "position": [400, 0],
         "parameters": {"includeOtherFields": True, "assignments": {"assignments": [
             {"id": "r", "name": "expression", "value": "={{ Math.random() }}", "type": "number"}
         ]}}},
        {"name": "Code", "type": "n8n-nodes-base.code", "typeVersion": 2, "position": [600, 0],
         "parameters": {"jsCode": "return $input.all().map((item) => "
                        "({json: {...item.json, code: Math.random()}}));"}},
    ],
    "connections": {
        "Start": {"main": [[{"node": "Id", "type": "main", "index": 0}]]},
        "Id": {"main": [[{"node": "Roll", "type": "main", "index": 0}]]},
        "Roll": {"main": [[{"node": "Code", "type": "main", "index": 0}]]},
    },
}  # fmt: skip


async def drawn(manager: SandboxManager, thread: str, run: str) -> dict[str, object]:
    ran = await manager.toolchain(thread).execute(RANDOM_DRAWS, execution_id=run)
    assert ran.status == "success", ran
    item = ran.nodes["Code"]["outputs"][0]["items"][0]
    assert isinstance(item, dict) and {"id", "expression", "code"} <= set(item), item
    return item


async def test_sandboxes_restored_from_one_checkpoint_draw_different_random_values(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine, tmp_path: Path
) -> None:
    """A restore clones the template's processes with their memory (V8's generator state,
    OpenSSL's, a UUID package's): each clone must still draw its own values."""
    template = SandboxManager(runsc_provider)
    before = await drawn(template, "template", "warm")  # every module loaded, generators used
    container = await template.acquire("template")
    await template.close()
    runsc_engine.checkpoint(container.id, tmp_path / "warm", leave_running=True)
    clones = SandboxManager(runsc_provider)
    try:
        draws = []
        for thread in ("clone-1", "clone-2"):
            runsc_provider.ensure_started(thread, tmp_path / "warm")
            draws.append(await drawn(clones, thread, "after"))
        for key in ("id", "expression", "code"):
            values = {str(before[key]), *(str(d[key]) for d in draws)}
            assert len(values) == 3, f"{key} repeated across clones: {values}"
    finally:
        await clones.close()


async def test_new_sandboxes_come_from_a_template_made_at_first_need(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine
) -> None:
    """The first sandbox is made cold and a template (per image, kind and readiness) made in
    the background; later ones are restored from it, their compiler loaded before any build.
    A template that cannot be restored from is counted, dropped, and the sandbox started
    cold."""
    manager = SandboxManager(runsc_provider)
    try:
        assert manager.pool.templates is not None
        for kept in Readiness:  # made by an earlier run on this host: made anew here
            shutil.rmtree(manager.pool.templates.path(kept), ignore_errors=True)
        await manager.acquire("first")
        cold = await manager.operation("first", "stats")
        assert cold["threads"]["compiler"] is False  # nothing loaded until its first build
        readiness = manager.pool.next_readiness()
        deadline = time.monotonic() + 300
        while manager.pool.templates.ready(readiness) is None:
            assert time.monotonic() < deadline, "the template was never made"
            await asyncio.sleep(0.5)
        await manager.acquire("second")
        restored = await manager.operation("second", "stats")
        assert restored["threads"]["compiler"] is True
        assert await manager.write_file("second", "own.txt", b"mine") == 4
        # A template gone bad: the restore fails, the sandbox starts cold all the same.
        template = manager.pool.templates.ready(readiness)
        assert template is not None
        (template / "checkpoint.img").write_bytes(b"not a checkpoint")
        await manager.acquire("third")
        assert manager.pool.templates.failed_restores == 1
        assert manager.pool.templates.ready(readiness) is None  # made again at the next need
        third = await manager.operation("third", "stats")
        assert third["threads"]["compiler"] is False
    finally:
        await manager.close()


# A main process that, each time /tmp/go appears, makes an X25519 key pair in OpenSSL's native
# code (as a TLS handshake does) and writes its public key to /tmp/key; its generator is
# instantiated before the checkpoint. RESEED: OpenSSL reseeded first, as the worker does when
# a channel opens (which a restored worker does before it serves anything).
NATIVE_DRAW = """const fs = require('fs');
const crypto = require('crypto');
const draw = () => crypto.generateKeyPairSync('x25519').publicKey
  .export({{ type: 'spki', format: 'der' }}).toString('hex');
draw();
setInterval(() => {{
  if (!fs.existsSync('/tmp/go')) return;
  fs.unlinkSync('/tmp/go');
  {reseed}
  fs.writeFileSync('/tmp/key.new', draw());
  fs.renameSync('/tmp/key.new', '/tmp/key');
}}, 20);
"""
RESEED = "require('/opt/app/bin/fresh-random.cjs').reseedOpenssl();"


def native_draws(engine: RunscEngine, image: str, owner: str, work: Path, reseed: str) -> list[str]:
    """The first native draw after a restore, in each of two clones of one template."""
    template = new_container(
        engine, image, owner, ["node", "-e", NATIVE_DRAW.format(reseed=reseed)]
    )
    engine.start(template.id)
    time.sleep(1.5)  # its first draw made
    engine.checkpoint(template.id, work, leave_running=False)
    keys = []
    for _ in range(2):
        clone = new_container(engine, image, owner, ["node", "-e", "0"])
        engine.restore(clone.id, work)
        run(engine, clone, "touch /tmp/go")
        deadline = time.monotonic() + 30
        while "key" not in run(engine, clone, "ls /tmp"):
            assert time.monotonic() < deadline, "the clone never drew"
            time.sleep(0.05)
        keys.append(run(engine, clone, "cat /tmp/key"))
    return keys


def test_clones_draw_their_own_keys_in_openssl_too(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage, owner: str, tmp_path: Path
) -> None:
    """OpenSSL's generator is in a checkpoint too: without a reseed two clones make the same
    key (the probe sees the problem); reseeded from the kernel (reseed.node) they do not."""
    image = sandbox_image.tag
    plain = native_draws(runsc_engine, image, owner, tmp_path / "plain", "")
    assert plain[0] == plain[1]
    fresh = native_draws(runsc_engine, image, owner, tmp_path / "fresh", RESEED)
    assert fresh[0] != fresh[1]


async def test_an_idle_sandbox_is_suspended_and_comes_back_as_it_was(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine
) -> None:
    """Idle past its window, a sandbox is checkpointed and ends (its cgroup, so its CPU and
    memory, gone); its next use restores it: its files, its /tmp, its worker's process."""
    manager = SandboxManager(runsc_provider, idle_ttl=timedelta(0))
    try:
        made = await manager.run_command("t1", "echo in-memory > /tmp/state; echo kept > kept.txt")
        assert made.success, made
        before = await manager.operation("t1", "stats")
        container = await manager.acquire("t1")
        assert await manager.sweep_idle() == ["t1"]
        assert runsc_engine.inspect(container.id).status == "exited"  # type: ignore[union-attr]
        own = f"{CGROUP_PARENT.strip('/')}/{container.id}"
        left = [c.name for c in CGROUPS.iterdir() if (c / own).exists()]
        assert left == []  # in no controller: none of them kept an empty directory behind
        back = await manager.run_command("t1", "cat /tmp/state kept.txt")
        assert back.stdout == "in-memory\nkept\n"
        after = await manager.operation("t1", "stats")
        assert after["pid"] == before["pid"] and after["uptime"] > before["uptime"]
        assert (await manager.acquire("t1")).id == container.id
    finally:
        await manager.close()


async def test_a_sandbox_stopped_right_after_a_command_is_saved_every_time(
    runsc_provider: SandboxProvider,
) -> None:
    """A stop that follows a command at once (the worker's channel made beside the command
    still connecting, the launcher's just let go) is a suspend each time: gVisor cannot save
    a socket still connected to the host, and a checkpoint that met one ended the sandbox
    (its /tmp lost)."""
    manager = SandboxManager(runsc_provider)
    try:
        for round_ in range(1, 7):
            made = await manager.run_command("t1", f"echo {round_} >> /tmp/rounds")
            assert made.success, made
            await manager.stop("t1")
        back = await manager.run_command("t1", "cat /tmp/rounds")
        assert back.stdout.split() == [str(n) for n in range(1, 7)]
    finally:
        await manager.close()


async def test_a_service_that_stops_leaves_nothing_running_and_takes_its_sandboxes_up_again(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine, owner: str
) -> None:
    """The service's stop (SIGTERM) removes its pool and suspends the sandboxes it holds: none
    of the owner's sandboxes runs after it; the next process resumes them as they were."""
    manager = SandboxManager(runsc_provider, pool_size=1)
    try:
        await manager.pool.fill()
        made = await manager.run_command("t1", "echo in-memory > /tmp/state; echo kept > kept.txt")
        assert made.success, made
        before = await manager.operation("t1", "stats")
        if manager.pool.refilling is not None:
            await manager.pool.refilling  # the claim's refill: a member to remove
        pooled = [entry.container.id for entry in manager.pool.members]
        assert pooled
    finally:
        await manager.shutdown()
    owned = runsc_engine.containers({identity.LABEL_OWNER: owner})
    assert [c.name for c in owned if c.status == "running"] == []
    assert all(runsc_engine.inspect(container_id) is None for container_id in pooled)
    after = SandboxManager(runsc_provider)
    try:
        back = await after.run_command("t1", "cat /tmp/state kept.txt")
        assert back.stdout == "in-memory\nkept\n"
        resumed = await after.operation("t1", "stats")
        assert resumed["pid"] == before["pid"] and resumed["uptime"] > before["uptime"]
    finally:
        await after.close()


async def test_the_pool_keeps_running_only_the_members_claims_need(
    runsc_provider: SandboxProvider, runsc_engine: RunscEngine
) -> None:
    """Where a restore is cheap, the pool is sized by the claims of its window: full until a
    window has passed since the start, empty after a window without claims (its members
    removed: they would burn CPU idle), one member again once claims come."""
    manager = SandboxManager(runsc_provider, pool_size=2, pool_window=timedelta(minutes=5))
    try:
        await manager.pool.fill()
        members = [entry.container.id for entry in manager.pool.members]
        assert len(members) == 2  # nothing measured yet: the whole size
        manager.pool.demand_window_s = 1.0  # a window now over, without a claim
        await asyncio.sleep(1.2)
        assert manager.pool.target() == 0
        assert await manager.sweep_idle() == []  # the housekeeping's sweep trims the pool
        assert manager.pool.count() == 0
        assert all(runsc_engine.inspect(member) is None for member in members)
        manager.pool.demand_window_s = 60.0
        container = await manager.acquire("t1")  # no member: made on demand
        assert container.id not in members
        assert manager.pool.refilling is not None
        await manager.pool.refilling
        # One claim a minute, a member made in well under a second: one member suffices.
        assert manager.pool.target() == 1 and manager.pool.count() == 1
    finally:
        await manager.close()


def test_a_workspace_seeded_on_the_host_is_the_one_the_seeding_exec_makes(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage, owner: str
) -> None:
    """runsc fills a new volume from the seed on the host (a copy inside gVisor costs ~0.25
    CPU-s): files, owners and modes as the exec seeding gives them, and marked, so that exec
    (run all the same) seeds nothing."""
    listing = "find . -printf '%u:%g %m %y %P\\n' | sort"
    seeded: dict[str, str] = {}
    for way, seed in (("host", SEED_DIR), ("exec", None)):
        container = new_container(runsc_engine, sandbox_image.tag, owner, volume_seed=seed)
        running = runsc_engine.start(container.id)
        if way == "host":
            assert MARKER in run(runsc_engine, running, "ls -A")  # before any exec seeded it
        initialise(runsc_engine, THREAD, running)
        seeded[way] = run(runsc_engine, running, listing)
        # A command's job uid (group 1000) edits the seed.
        job = runsc_engine.exec(
            running.id,
            ["sh", "-c", "echo more >> tsconfig.json"],
            workdir=WORKSPACE,
            job=JOB_UID_FIRST,
        )
        assert job.exit_code == 0, job
    assert "tsconfig.json" in seeded["host"] and MARKER in seeded["host"]
    assert seeded["host"] == seeded["exec"]


def test_restores_of_one_checkpoint_are_new_sandboxes_with_their_own_mounts(
    runsc_engine: RunscEngine,
    sandbox_image: BuiltImage,
    owner: str,
    tmp_path: Path,
) -> None:
    template = new_container(runsc_engine, sandbox_image.tag, owner, TICKER)
    runsc_engine.start(template.id)
    # State that lives in the sandbox's memory: a file in its /tmp, and its main process,
    # which keeps ticking. A process that `exec` started is not of the main process's tree:
    # it does not come back in a restore (the worker of a template must be the main one's).
    run(
        runsc_engine,
        template,
        "echo from-the-template > /tmp/state; echo template-only > in-volume.txt; "
        "setsid sleep 4404 </dev/null >/dev/null 2>&1 &",
    )
    while "sleep 4404" not in run(runsc_engine, template, "ps -eo args=; cat /tmp/tick"):
        time.sleep(0.05)
    image_dir = tmp_path / "checkpoint"
    runsc_engine.checkpoint(template.id, image_dir, leave_running=True)
    assert (image_dir / "checkpoint.img").is_file()

    clones = [new_container(runsc_engine, sandbox_image.tag, owner, TICKER) for _ in range(2)]
    for clone in clones:
        restored = runsc_engine.restore(clone.id, image_dir)
        assert restored.status == "running" and restored.id == clone.id
    for index, clone in enumerate(clones):
        assert run(runsc_engine, clone, "cat /tmp/state") == "from-the-template\n"
        assert "sleep 4404" not in run(runsc_engine, clone, "ps -eo args=")
        # The volume is the clone's own (the template's file is not in it), its /etc its own.
        assert run(runsc_engine, clone, "ls -A") == ""
        assert run(runsc_engine, clone, "cat /etc/hostname").strip() == clone.id[:12]
        run(runsc_engine, clone, f"echo clone-{index} > mine.txt")
        first = int(run(runsc_engine, clone, "cat /tmp/tick"))
        time.sleep(0.3)
        assert int(run(runsc_engine, clone, "cat /tmp/tick")) > first  # its processes run on
    assert run(runsc_engine, clones[0], "cat mine.txt") == "clone-0\n"
    assert run(runsc_engine, clones[1], "cat mine.txt") == "clone-1\n"
    assert run(runsc_engine, template, "ls -A") == "in-volume.txt\n"
    # A checkpoint that does not leave it running ends the sandbox; its files stay.
    runsc_engine.checkpoint(clones[0].id, tmp_path / "idle", leave_running=False)
    assert runsc_engine.inspect(clones[0].id).status == "exited"  # type: ignore[union-attr]
    assert runsc_engine.restore(clones[0].id, tmp_path / "idle").status == "running"
    assert run(runsc_engine, clones[0], "cat mine.txt /tmp/state") == (
        "clone-0\nfrom-the-template\n"
    )


def test_a_restore_that_fails_says_why_and_leaves_the_container_as_it_was(
    runsc_engine: RunscEngine,
    sandbox_image: BuiltImage,
    owner: str,
    tmp_path: Path,
) -> None:
    """A checkpoint that is not there (or not whole) fails the restore whole, with runsc's
    reason, and leaves the container created: removable, or startable afresh (the cold start
    a caller falls back to)."""
    clone = new_container(runsc_engine, sandbox_image.tag, owner)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SandboxUnavailableError, match="could not restore the sandbox: "):
        runsc_engine.restore(clone.id, tmp_path / "empty")
    assert runsc_engine.inspect(clone.id).status == "created"  # type: ignore[union-attr]
    runsc_engine.start(clone.id)
    assert run(runsc_engine, clone, "echo fresh") == "fresh\n"


def test_the_engine_lists_only_what_runs_and_forgets_what_was_removed(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage, owner: str
) -> None:
    a = new_container(runsc_engine, sandbox_image.tag, owner)
    b = new_container(runsc_engine, sandbox_image.tag, owner)
    runsc_engine.start(a.id)
    listed = {c.id: c.status for c in runsc_engine.containers({identity.LABEL_OWNER: owner})}
    assert listed == {a.id: "running", b.id: "created"}
    runsc_engine.remove(a.id)
    assert runsc_engine.inspect(a.id) is None
    bundle = json.loads((runsc_engine.root / "bundles" / b.id / "config.json").read_text())
    assert bundle["root"]["readonly"] is True and bundle["process"]["capabilities"] == {}
    assert not (runsc_engine.root / "bundles" / a.id).exists()


def test_a_call_that_meets_a_sandbox_as_it_is_removed_is_told_it_is_gone(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage, owner: str, tmp_path: Path
) -> None:
    """A removal deletes the record and then the bundle: a call that found the record and
    misses the bundle (its process spec, its launcher's lock and socket) is told the sandbox
    went, as every call that meets a removed sandbox is, never the missing file (seen under
    load as an internal error of a command whose sandbox was removed from outside)."""
    container = runsc_engine.start(new_container(runsc_engine, sandbox_image.tag, owner).id)
    bundle = runsc_engine.root / "bundles" / container.id
    away = bundle.with_name(f"{bundle.name}.away")
    bundle.rename(away)
    try:
        with pytest.raises(ContainerGoneError):
            runsc_engine.exec(container.id, ["true"], workdir=WORKSPACE)
        with pytest.raises(ContainerGoneError):
            runsc_engine.exec_attached(container.id, ["true"], workdir=WORKSPACE, stdin=True)
        with pytest.raises(ContainerGoneError, match="removed before its job launcher"):
            wait_for_worker(
                bundle / LAUNCHER_DIR / "jobs.sock",
                bundle / LAUNCHER_LOCK,
                5.0,
                lambda: True,
                "job launcher",
            )
    finally:
        away.rename(bundle)
    runsc_engine.remove(container.id)


def state_of(engine: RunscEngine, container_id: str) -> list[Path]:
    return list((engine.root / "state").glob(f"*/{container_id}_sandbox:*"))


def test_a_removed_sandbox_is_gone_at_once_and_its_runsc_state_soon_after(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage, owner: str
) -> None:
    """A removal does not wait for the host's init to reap the sandbox's processes: they are
    dead when it returns, its runsc state goes in the background, and state that a service
    which ended meanwhile left behind goes when the next engine starts."""
    removed, left = (
        runsc_engine.start(new_container(runsc_engine, sandbox_image.tag, owner).id)
        for _ in range(2)
    )
    assert state_of(runsc_engine, removed.id) and state_of(runsc_engine, left.id)
    runsc_engine.remove(removed.id)
    assert runs(removed.id) is not True and runsc_engine.inspect(removed.id) is None
    # As a service that died before its deletion ran: the processes killed, the record gone.
    assert kill_processes(left.id)
    (runsc_engine.root / "records" / "containers" / f"{left.id}.json").unlink()
    RunscEngine(runsc_engine.client, runsc_engine.root)
    deadline = time.monotonic() + 30
    while state_of(runsc_engine, removed.id) or state_of(runsc_engine, left.id):
        assert time.monotonic() < deadline, "runsc state of removed sandboxes stayed"
        time.sleep(0.1)
    parent = CGROUPS / "pids" / CGROUP_PARENT.strip("/")
    assert not (parent / removed.id).exists() and not (parent / left.id).exists()
    # A sandbox that ends as its engine closes is removed after the close: deleted there
    # and then, its state not left for lack of a background thread.
    closing = RunscEngine(connect(), runsc_engine.root)
    ended = closing.start(new_container(closing, sandbox_image.tag, owner).id)
    closing.close()
    closing.remove(ended.id)
    assert not state_of(closing, ended.id) and not (parent / ended.id).exists()


def test_a_new_engine_sweeps_empty_cgroups_no_record_names(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage, owner: str
) -> None:
    """Cgroups left by sandboxes whose records are gone (a crash, an earlier version) go when
    an engine starts, once ten minutes old; a fresh one (the sandbox another process of this
    host is making) and a running sandbox's stay, and it runs on."""
    running = runsc_engine.start(new_container(runsc_engine, sandbox_image.tag, owner).id)
    parent = CGROUPS / "pids" / CGROUP_PARENT.strip("/")
    stray, fresh = parent / uuid.uuid4().hex, parent / uuid.uuid4().hex
    for cgroup in (stray, fresh):
        cgroup.mkdir(parents=True)
    long_ago = time.time() - 601
    os.utime(stray, (long_ago, long_ago))
    RunscEngine(runsc_engine.client, runsc_engine.root)
    assert not stray.exists()
    assert fresh.is_dir()
    fresh.rmdir()
    assert (parent / running.id).is_dir()
    assert run(runsc_engine, running, "echo alive") == "alive\n"


def test_a_new_engine_sweeps_empty_state_roots_left_long_ago(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage, owner: str
) -> None:
    """Each owner's runsc state root stays behind when its last sandbox goes (a test suite
    leaves hundreds): an engine that starts removes the empty ones untouched for an hour; a
    fresh empty one (runsc may be about to write into it) and one in use stay."""
    running = runsc_engine.start(new_container(runsc_engine, sandbox_image.tag, owner).id)
    state = runsc_engine.root / "state"
    in_use = [root for root in state.iterdir() if any(root.glob(f"{running.id}_sandbox:*"))]
    assert len(in_use) == 1
    old, fresh = state / uuid.uuid4().hex[:16], state / uuid.uuid4().hex[:16]
    for root in (old, fresh, in_use[0]):
        root.mkdir(exist_ok=True)
    long_ago = time.time() - 2 * 3600
    for root in (old, in_use[0]):
        os.utime(root, (long_ago, long_ago))
    RunscEngine(runsc_engine.client, runsc_engine.root)
    assert not old.exists()
    assert fresh.is_dir() and in_use[0].is_dir()
    assert run(runsc_engine, running, "echo alive") == "alive\n"
    fresh.rmdir()


def test_a_new_engine_removes_the_leases_of_holders_that_died(
    runsc_engine: RunscEngine, sandbox_image: BuiltImage
) -> None:
    """On this engine a service's owner lease is a file it keeps locked, no sandbox (a gVisor
    kernel running `cat` burned ~5 % of a core for as long as its service lived). Its holder
    killed, the kernel unlocks the file at once, but nothing removes it until that owner's
    leases are listed again, which for an owner never used again (a test's) is never. An
    engine that starts removes it."""
    owner = f"lease-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LEASE, sandbox_image.tag, owner, "runsc"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None  # its log may come first: read up to the word
        assert "held" in (line.strip() for line in iter(child.stdout.readline, ""))
        held = [
            path
            for path in runsc_engine.lease_root.glob("*.json")
            if json.loads(path.read_text())["owner"] == owner
        ]
        assert len(held) == 1
        records = runsc_engine.root / "records" / "containers"
        assert not [
            path
            for path in records.glob("*.json")
            if json.loads(path.read_text())["labels"].get(identity.LABEL_LEASE) == owner
        ]
    finally:
        child.kill()  # SIGKILL: no clean-up of its own
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert held[0].exists()
    RunscEngine(runsc_engine.client, runsc_engine.root)
    assert not held[0].exists()
