"""Per-thread sandboxes on the real Docker engine with the real image."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import docker
import pytest

from sandbox import files, identity
from sandbox.commands import CommandRunner
from sandbox.docker_engine import DockerEngine, connect
from sandbox.egress import EgressProxy
from sandbox.engine import ContainerInfo, JobLimits, SandboxLimits
from sandbox.errors import (
    EditMismatchError,
    FileTooLargeError,
    InvalidPatternError,
    PathEscapeError,
    SandboxError,
    SandboxUnavailableError,
    WorkspaceFileNotFoundError,
    WorkspaceFullError,
)
from sandbox.image.build import BIN_DIR, BuiltImage
from sandbox.image.rootfs import WORKSPACE
from sandbox.manager import MARKER, SandboxManager
from sandbox.provider import SandboxInfo, SandboxProvider
from sandbox.readiness import Readiness, ReadinessMix
from sandbox.runtimes import GVISOR_HOST_PIDS_FACTOR, GVISOR_JOB_TASKS, GVISOR_KERNEL_MEMORY, RUNSC
from sandbox.search import GrepQuery
from sandbox.worker import WorkerClient
from sandbox.workspace_disk import WorkspaceDisks
from tests.sandbox_fixtures import docker_attrs


def sh(container: ContainerInfo, script: str) -> str:
    """A script's output in the container, as the sandbox user (through the engine itself,
    not the seam under test)."""
    client = connect()
    try:
        result = client.containers.get(container.id).exec_run(["sh", "-c", script], user="1000")
    finally:
        client.close()
    return str(result.output.decode())


def ensured(provider: SandboxProvider, thread_id: str) -> SandboxInfo:
    provider.ensure(thread_id)
    info = provider.get(thread_id)
    assert info is not None
    return info


@pytest.mark.attack
def test_the_sandbox_is_hardened(provider: SandboxProvider) -> None:
    info = ensured(provider, "thread-hardening")
    container = provider.container("thread-hardening")
    attrs = docker_attrs(container)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Init"] is True
    assert host["Runtime"] == provider.limits.runtime == info.runtime
    if info.runtime == RUNSC:
        # Counted by the sandbox's own kernel, per uid; the host's count is a backstop.
        assert host["Ulimits"] == [{"Name": "nproc", "Soft": 1024, "Hard": 1024}]
        assert host["PidsLimit"] == 512 * GVISOR_HOST_PIDS_FACTOR
        # Room for the sandbox's kernel; each command keeps to a job's tasks.
        assert host["Memory"] == host["MemorySwap"] == 1024**3 + GVISOR_KERNEL_MEMORY
        assert provider.job_limits == JobLimits(processes=GVISOR_JOB_TASKS)
    else:
        assert host["PidsLimit"] == 512
        assert host["Memory"] == host["MemorySwap"] == 1024**3
        assert provider.job_limits is None
    assert host["NanoCpus"] == 1_000_000_000
    assert attrs["Config"]["User"] == "1000:1000"
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts["/home/user/workspace"]["Type"] == "volume"
    assert mounts["/home/user/workspace"]["Name"] == info.volume_name
    # And from the inside.
    status = sh(container, "grep -E '^CapEff' /proc/self/status; id -u")
    assert "CapEff:\t0000000000000000" in status
    assert status.strip().endswith("1000")
    # prctl(PR_GET_NO_NEW_PRIVS): gVisor's /proc/self/status has no NoNewPrivs line.
    no_new_privs = "import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))"
    assert sh(container, f"python3 -c '{no_new_privs}'").strip() == "1"
    interfaces = sh(container, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").split()
    assert interfaces == ["lo"]
    # The user's own home, outside the workspace: writable by permissions, not by the mount.
    assert "Read-only file system" in sh(container, "touch /home/user/x")


def test_identity_and_labels_are_deterministic(provider: SandboxProvider, owner: str) -> None:
    info = ensured(provider, "thread-id")
    expected = str(uuid.uuid5(identity.NAMESPACE, "instance-ai-thread-thread-id"))
    assert info.sandbox_id == expected
    assert info.container_name == identity.container_name(owner, expected)
    assert info.labels[identity.LABEL_OWNER] == owner
    assert info.labels[identity.LABEL_THREAD] == "thread-id"
    assert info.labels[identity.LABEL_IMAGE] == provider.image
    assert info.created_at is not None
    assert provider.ensure("thread-id").id == info.container_id


@pytest.mark.attack
def test_threads_cannot_see_each_other(provider: SandboxProvider) -> None:
    a, b = ensured(provider, "thread-a"), ensured(provider, "thread-b")
    assert a.volume_name != b.volume_name
    container_a, container_b = provider.container("thread-a"), provider.container("thread-b")
    files.write_file(files.Workspace(provider.engine, container_a.id), "secret.txt", b"only for a")
    sh(container_a, "sleep 300 >/dev/null 2>&1 &")
    assert "secret.txt" not in sh(container_b, "ls -a /home/user/workspace")
    assert sh(container_b, "ps -eo comm").split().count("sleep") == 1  # only its keep-alive


async def test_a_restart_reattaches_and_keeps_the_workspace(
    provider: SandboxProvider,
    docker_client: docker.DockerClient,
    sandbox_image: BuiltImage,
    owner: str,
) -> None:
    first = SandboxManager(provider)
    await first.write_file("t1", "src/main.workflow.ts", b"export default 1;\n")
    await first.write_file("t1", "package.json", b'{"edited": true}\n')
    container_id = (await first.acquire("t1")).id
    # A new process: new provider and manager, same owner.
    second = SandboxManager(
        SandboxProvider(
            DockerEngine(docker_client),
            image=sandbox_image.tag,
            owner=owner,
            limits=provider.limits,
        )
    )
    assert (await second.acquire("t1")).id == container_id
    assert await second.read_file("t1", "src/main.workflow.ts") == b"export default 1;\n"
    # Initialised once: the seed did not overwrite the user's edit.
    assert await second.read_file("t1", "package.json") == b'{"edited": true}\n'
    names = {e.path for e in (await second.list_files("t1"))[0]}
    assert {MARKER, "src", "chunks", "knowledge-base", "tsconfig.json"} <= names


async def test_concurrent_first_uses_create_one_sandbox(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider)
    containers = await asyncio.gather(*(manager.acquire("t1") for _ in range(5)))
    assert len({c.id for c in containers}) == 1
    assert len(provider.list_sandboxes()) == 1


async def test_a_container_stopped_or_removed_from_outside_comes_back_with_its_files(
    provider: SandboxProvider,
) -> None:
    manager = SandboxManager(provider)
    await manager.write_file("t1", "keep.txt", b"still here")
    manager.engine.kill((await manager.acquire("t1")).id)
    assert await manager.read_file("t1", "keep.txt") == b"still here"
    manager.engine.remove((await manager.acquire("t1")).id)
    assert await manager.read_file("t1", "keep.txt") == b"still here"


async def test_idle_eviction_keeps_the_container_and_spares_busy_threads(
    provider: SandboxProvider,
) -> None:
    busy = {"t-busy"}

    async def is_busy(thread_id: str) -> bool:
        return thread_id in busy

    manager = SandboxManager(provider, idle_ttl=timedelta(0), is_busy=is_busy)
    await manager.acquire("t-idle")
    await manager.acquire("t-busy")
    assert await manager.sweep_idle() == ["t-idle"]
    assert manager.cached_threads() == ["t-busy"]
    assert provider.get("t-idle") is not None  # only the cache entry went


async def test_ephemeral_mode_destroys_idle_sandboxes(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider, idle_ttl=timedelta(0), ephemeral=True)
    await manager.acquire("t1")
    assert await manager.sweep_idle() == ["t1"]
    assert provider.get("t1") is None


async def test_destroy_removes_container_and_volume(
    provider: SandboxProvider, docker_client: docker.DockerClient
) -> None:
    manager = SandboxManager(provider)
    await manager.acquire("t1")
    info = provider.get("t1")
    assert info is not None
    assert await manager.destroy("t1")
    assert provider.get("t1") is None
    with pytest.raises(docker.errors.NotFound):
        docker_client.volumes.get(info.volume_name)


async def test_the_janitor_removes_orphans_and_keeps_live_threads(
    provider: SandboxProvider, docker_client: docker.DockerClient
) -> None:
    async def thread_exists(thread_id: str) -> bool:
        return thread_id == "alive"

    manager = SandboxManager(provider, thread_exists=thread_exists)
    await manager.acquire("alive")
    await manager.acquire("deleted-while-down")
    orphan = provider.get("alive")
    assert orphan is not None
    # A workspace volume whose container is gone.
    docker_client.volumes.create(
        "instance-ai-orphan-" + uuid.uuid4().hex[:6],
        labels={identity.LABEL_OWNER: provider.owner},
    )
    # A sandbox being made a template: neither a pool member nor listed.
    source = provider.create_template_source()
    assert source.id not in {c.id for c in provider.pooled()}
    report = await manager.janitor()
    assert report.removed_sandboxes == ["deleted-while-down"]
    assert report.removed_volumes == []  # too young: it may be a sandbox being made
    provider.orphan_grace = timedelta(0)
    report = await manager.janitor()
    assert len(report.removed_volumes) == 1
    # Once older than the grace, one a dead process left half made.
    assert report.removed_sandboxes == [source.labels[identity.LABEL_SANDBOX]]
    assert provider.engine.inspect(source.id) is None
    assert [i.thread_id for i in provider.list_sandboxes()] == ["alive"]


async def test_egress_directories_go_with_their_sandboxes_and_orphans_are_swept(
    docker_engine: DockerEngine,
    sandbox_image: BuiltImage,
    owner: str,
    tmp_path: Path,
    sandbox_limits: SandboxLimits,
) -> None:
    root = tmp_path / "egress"
    provider = SandboxProvider(
        docker_engine, image=sandbox_image.tag, owner=owner, egress_root=root, limits=sandbox_limits
    )

    async def thread_exists(thread_id: str) -> bool:
        return True

    manager = SandboxManager(provider, thread_exists=thread_exists)
    await manager.acquire("kept")
    await manager.acquire("deleted")
    kept, deleted = provider.get("kept"), provider.get("deleted")
    assert kept is not None and deleted is not None
    kept_dir, deleted_dir = (root / i.labels[identity.LABEL_EGRESS] for i in (kept, deleted))
    assert kept_dir.is_dir() and deleted_dir.is_dir()

    await manager.destroy("deleted")
    assert not deleted_dir.exists() and kept_dir.is_dir()

    # Left behind by containers removed from outside: swept once older than the grace.
    hour_ago = time.time() - 3600
    stale, young, foreign = root / "0123456789abcdef", root / "fedcba9876543210", root / "notes"
    for directory in (stale, young, foreign):
        directory.mkdir()
    os.utime(stale, (hour_ago, hour_ago))
    os.utime(foreign, (hour_ago, hour_ago))
    report = await manager.janitor()
    assert report.removed_egress_dirs == [stale.name]
    assert young.is_dir() and foreign.is_dir() and kept_dir.is_dir()
    docker_engine.remove(kept.container_id)
    provider.orphan_grace = timedelta(0)
    report = await manager.janitor()
    assert sorted(report.removed_egress_dirs) == sorted([kept_dir.name, young.name])

    await manager.close()
    assert root.is_dir()  # something not its own is still in it
    foreign.rmdir()
    provider.close()
    assert not root.exists()


def test_a_container_that_could_not_be_made_leaves_no_egress_directory(
    docker_engine: DockerEngine, owner: str, tmp_path: Path
) -> None:
    root = tmp_path / "egress"
    missing = f"instance-ai-sandbox:missing-{uuid.uuid4().hex[:8]}"
    provider = SandboxProvider(docker_engine, image=missing, owner=owner, egress_root=root)
    with pytest.raises(SandboxError):
        provider.ensure("t1")  # the engine has no such image
    assert list(root.iterdir()) == []


@pytest.mark.attack
async def test_the_deadline_kills_the_whole_tree_including_setsid_escapees(
    provider: SandboxProvider,
) -> None:
    manager = SandboxManager(provider)
    started = time.monotonic()
    result = await manager.run_command(
        "t1",
        "setsid sh -c 'sleep 300' & nohup sleep 301 >/dev/null 2>&1 & echo started; wait",
        timeout_s=1.5,
    )
    assert result.timed_out and not result.success
    assert result.stdout == "started\n"
    assert time.monotonic() - started < 30
    container = await manager.acquire("t1")
    assert container.status == "running"  # the sandbox survives its command
    processes = sh(container, "ps -eo uid=,args=")
    assert "sleep 300" not in processes and "sleep 301" not in processes


@pytest.mark.attack
async def test_cancelling_the_caller_kills_the_tree(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider)
    task = asyncio.create_task(
        manager.run_command("t1", "setsid sleep 302 & sleep 303", timeout_s=120)
    )
    container = await manager.acquire("t1")
    for _ in range(100):
        if "sleep 303" in sh(container, "ps -eo args="):
            break
        await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    processes = sh(container, "ps -eo args=")
    assert "sleep 302" not in processes and "sleep 303" not in processes


async def test_results_report_exit_codes_and_output(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider)
    result = await manager.run_command("t1", "echo out; echo err >&2; exit 3", timeout_s=30)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.timed_out and not result.truncated and result.full_output_path is None
    made = await manager.run_command("t1", "echo from-a-job > job.txt", timeout_s=30)
    assert made.success
    # What a job makes stays editable by the sandbox user.
    assert await manager.str_replace("t1", "job.txt", "a-job", "the-user") == 1


@pytest.mark.attack
async def test_zombies_do_not_accumulate(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider)
    for _ in range(5):
        await manager.run_command(
            "t1", "for i in $(seq 40); do sleep 0.01 & done; exit 0", timeout_s=30
        )
    await asyncio.sleep(0.5)
    container = await manager.acquire("t1")
    states = sh(container, "ps -eo stat=").split()
    assert not [s for s in states if s.startswith("Z")]


async def test_cut_output_is_kept_whole_in_the_workspace(provider: SandboxProvider) -> None:
    runner = CommandRunner(provider.engine, max_output_bytes=1000)
    manager = SandboxManager(provider, runner=runner)
    result = await manager.run_command("t1", "seq 1 50000", timeout_s=60)
    assert result.truncated and len(result.stdout) == 1000
    assert result.full_output_path is not None
    saved = await manager.read_file("t1", result.full_output_path)
    assert saved.decode().splitlines() == [str(n) for n in range(1, 50001)]


@pytest.mark.attack
@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "src/../../x", "link-out/x", "link-file"])
async def test_paths_leading_out_of_the_workspace_are_refused(
    provider: SandboxProvider, path: str
) -> None:
    manager = SandboxManager(provider)
    container = await manager.acquire("t1")
    sh(container, "ln -s /tmp link-out; ln -s /etc/passwd link-file")
    with pytest.raises(PathEscapeError):
        await manager.read_file("t1", path)
    with pytest.raises(PathEscapeError):
        await manager.write_file("t1", path, b"x")
    assert "x" not in sh(container, "ls /tmp")


async def test_edits_need_a_unique_exact_match_and_writes_have_a_cap(
    provider: SandboxProvider,
) -> None:
    manager = SandboxManager(provider, max_file_bytes=1000)
    await manager.write_file("t1", "a.txt", b"one two two")
    with pytest.raises(EditMismatchError, match="matches 2 places"):
        await manager.str_replace("t1", "a.txt", "two", "three")
    with pytest.raises(EditMismatchError, match="not found"):
        await manager.str_replace("t1", "a.txt", "four", "five")
    assert await manager.str_replace("t1", "a.txt", "two", "2", replace_all=True) == 2
    assert await manager.read_file("t1", "a.txt") == b"one 2 2"
    with pytest.raises(FileTooLargeError):
        await manager.write_file("t1", "big.txt", b"x" * 1001)
    assert "big.txt" not in {e.path for e in (await manager.list_files("t1"))[0]}


async def test_the_shell_tools_a_model_reaches_for_work(provider: SandboxProvider) -> None:
    """What a model runs first in a sandbox, under its runtime (Debian 12's runsc refused
    `ls /`: coreutils' statx flags). npm, on the PATH of the sandbox service API's sandboxes,
    installs there in tests/test_sandbox_api_n8n.py."""
    manager = SandboxManager(provider)
    await manager.write_file("tools", "notes/a.md", b"needle\n")
    script = (
        "set -e; ls / >/dev/null; ls -la notes | grep -c a.md; stat -c %s notes/a.md; "
        "find . -name a.md; grep -rl needle notes; rg -l needle notes; "
        'node -e \'console.log(require("fs").readdirSync("notes").length)\'; '
        "python3 -c 'import os; print(len(os.listdir(\"notes\")))'; "
        "echo done"
    )
    result = await manager.run_command("tools", script, timeout_s=60)
    assert result.exit_code == 0, result.stderr
    found = ["./notes/a.md", "notes/a.md", "notes/a.md"]  # find, grep, rg
    assert result.stdout.split() == ["1", "7", *found, "1", "1", "done"]


@pytest.mark.attack
async def test_a_fork_bomb_and_a_memory_hog_are_contained(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider)
    await manager.run_command("bomb", "b() { b | b & }; b; sleep 2", timeout_s=5)
    # Swept: nothing of any job uid is left alive, only the sandbox user's processes and this
    # check's own job. (Dead ones may wait a moment for PID 1 to reap them.)
    listed = await manager.run_command("bomb", "id -u; ps -eo uid=,stat=", timeout_s=60)
    assert listed.exit_code == 0, listed.stderr  # forks: not handed the bomb's uid and zombies
    own, *table = listed.stdout.split()
    alive = {uid for uid, stat in zip(table[::2], table[1::2], strict=True) if stat[0] != "Z"}
    assert alive == {"1000", own}, listed.stdout
    # One hog, then three at once (under gVisor no per-process limit holds them: the host's
    # OOM killer does, and the runner notices the command it hit).
    node_hog = 'node -e "const a=[]; for(;;) a.push(Buffer.alloc(64*1024*1024, 1))"'
    for hogs in (node_hog, f"{node_hog} & {node_hog} & {node_hog}"):
        hog = await manager.run_command("hog", hogs, timeout_s=60)
        assert hog.exit_code != 0 and not hog.timed_out  # killed for memory, not by the deadline
    # Both sandboxes, and a neighbour, still work.
    for thread_id in ("bomb", "hog", "neighbour"):
        ok = await manager.run_command(thread_id, "echo alive", timeout_s=30)
        assert ok.stdout == "alive\n", thread_id


def test_a_jobs_process_count_says_none_only_when_it_met_none_that_vanished(
    tmp_path: Path,
) -> None:
    """The launcher's count of a job's processes as its command ends (the host skips the kill
    script at 0): a process listed whose status is gone when read counts, since it may have
    been the job's and forked after the listing (a fork bomb left running once so)."""
    spec = importlib.util.spec_from_file_location("launcher", BIN_DIR / "launcher.py")
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    for pid, uid in (("1", 1000), ("7", 20001), ("8", 20000)):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "status").write_text(f"Name:\tsh\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (tmp_path / "self").mkdir()
    assert launcher.processes_of(20000, str(tmp_path)) == 1
    (tmp_path / "8" / "status").unlink()  # ended between the listing and the read
    assert launcher.processes_of(20000, str(tmp_path)) == 1
    (tmp_path / "8").rmdir()  # not listed at all: nothing of the job's
    assert launcher.processes_of(20000, str(tmp_path)) == 0


TASKS = "grep -E '^Max processes' /proc/self/limits"


def tasks_of(listing: str) -> str:
    """The soft limit of a /proc/<pid>/limits "Max processes" line."""
    return listing.removeprefix("Max processes").split()[0]


@pytest.mark.attack
async def test_a_commands_limits_hold_it_alone(provider: SandboxProvider) -> None:
    """A command keeps to a job's tasks under gVisor (where the container's cgroups count
    the sandbox's kernel), and the limit holds nothing else: gVisor shares a `docker exec`'s
    limits with the container's first process, so a limit set by the exec'd shell itself
    would hold the worker, the browser and every later command."""
    manager = SandboxManager(provider)
    inside = await manager.run_command("limits", TASKS, timeout_s=30)
    container = await manager.acquire("limits")
    first = sh(container, TASKS.replace("self", "1"))
    later = sh(container, TASKS)  # a process started after the command
    if provider.job_limits is None:  # runc: the container's cgroups hold each job
        assert tasks_of(inside.stdout) == tasks_of(first)
    else:
        assert tasks_of(inside.stdout) == str(GVISOR_JOB_TASKS)
        assert tasks_of(first) == tasks_of(later) == "1024"  # the container's own


async def test_a_dead_worker_is_replaced_transparently(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider)
    await manager.write_file("t1", "a.txt", b"first")
    container = await manager.acquire("t1")
    worker_pids = sh(container, "pgrep -f 'bin/worker[.]mjs'").split()
    assert len(worker_pids) == 1
    sh(container, "pkill -KILL -f 'bin/worker[.]mjs'")
    assert await manager.read_file("t1", "a.txt") == b"first"
    new_pids = sh(container, "pgrep -f 'bin/worker[.]mjs'").split()
    assert len(new_pids) == 1 and new_pids != worker_pids


async def test_a_file_call_whose_sandbox_ended_as_it_began_starts_it_again(
    provider: SandboxProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed worker takes a gVisor sandbox with it, whose state still says running a
    moment later: a call that took the sandbox as running in that moment starts it again and
    answers, with the workspace as it was. (The moment is made here: the sandbox stopped from
    outside, and the provider's running checks answering as they were before.)"""
    manager = SandboxManager(provider, use_worker=False)
    await manager.write_file("ending", "a.txt", b"kept")
    container = await manager.acquire("ending")
    provider.engine.kill(container.id)
    as_before = iter([True, True])  # one check a file call makes, one its exec path makes
    real = provider.still_running
    monkeypatch.setattr(provider, "still_running", lambda c: next(as_before, None) or real(c))
    assert await manager.read_file("ending", "a.txt") == b"kept"
    assert provider.still_running(container)
    # Removed, not stopped: the call fails as before, and says so.
    provider.engine.remove(container.id)
    as_before = iter([True, True])
    with pytest.raises(SandboxUnavailableError):
        await manager.read_file("ending", "a.txt")


@pytest.mark.attack
@pytest.mark.parametrize("use_worker", [True, False], ids=["worker", "exec-fallback"])
async def test_both_file_paths_follow_the_same_rules(
    provider: SandboxProvider, use_worker: bool
) -> None:
    manager = SandboxManager(provider, use_worker=use_worker, max_file_bytes=100)
    assert await manager.write_file("t1", "d/e/f.txt", b"\x00\xffbinary-safe") == 13
    assert await manager.read_file("t1", "d/e/f.txt") == b"\x00\xffbinary-safe"
    await manager.write_file("t1", "g.txt", b"x y y")
    with pytest.raises(EditMismatchError, match="matches 2 places"):
        await manager.str_replace("t1", "g.txt", "y", "z")
    assert await manager.str_replace("t1", "g.txt", "x", "w") == 1
    entries, truncated = await manager.list_files("t1", "d", recursive=True)
    assert [(e.path, e.type) for e in entries] == [
        ("e", "directory"),
        ("e/f.txt", "file"),
    ] and not truncated
    container = await manager.acquire("t1")
    sh(container, "ln -s /etc link")
    for escape in ("link/passwd", "../x", "/etc/hostname"):
        with pytest.raises(PathEscapeError):
            await manager.read_file("t1", escape)
    with pytest.raises(FileTooLargeError):
        await manager.write_file("t1", "big", b"x" * 101)
    # Search: the same answers on both paths; symlinks neither searched through nor followed.
    await manager.write_file("t1", "d/notes.md", b"Alpha\nbeta 12\ngamma\nBETA 7\n")
    found = await manager.grep("t1", GrepQuery(pattern=r"beta \d+", path="d", ignore_case=True))
    assert [(f.path, f.line, f.text, f.match) for f in found.lines] == [
        ("d/notes.md", 2, "beta 12", True),
        ("d/notes.md", 4, "BETA 7", True),
    ]
    assert (found.matches, found.files, found.truncated) == (2, 1, False)
    around = await manager.grep("t1", GrepQuery(pattern="gamma", path="d", context_lines=1))
    assert [(f.line, f.match) for f in around.lines] == [(2, False), (3, True), (4, False)]
    capped = await manager.grep("t1", GrepQuery(pattern="a", path="d", max_matches=2))
    assert capped.matches == 2 and capped.truncated
    binary = await manager.grep("t1", GrepQuery(pattern="binary", path="d/e"))
    assert binary.matches == 0  # d/e/f.txt holds a NUL: skipped as binary
    sh(container, f"ln -s {WORKSPACE}/d d/loop")
    assert (await manager.grep("t1", GrepQuery(pattern="gamma"))).matches == 1
    with pytest.raises(PathEscapeError):
        await manager.grep("t1", GrepQuery(pattern="root", path="link"))
    with pytest.raises(InvalidPatternError, match="not a valid"):
        await manager.grep("t1", GrepQuery(pattern="(unclosed", path="d"))
    with pytest.raises(WorkspaceFileNotFoundError):
        await manager.grep("t1", GrepQuery(pattern="x", path="nowhere"))


async def test_a_new_thread_gets_a_warm_sandbox_from_the_pool(
    provider: SandboxProvider, owner: str
) -> None:
    manager = SandboxManager(provider, pool_size=2)
    await manager.pool.fill()
    warm_ids = {entry.container.id for entry in manager.pool.members}
    assert len(warm_ids) == 2 and provider.list_sandboxes() == []  # the pool is not a thread's
    container = await manager.acquire("t1")
    assert container.id in warm_ids
    assert container.name == identity.container_name(owner, identity.sandbox_id("t1"))
    assert MARKER in {e.path for e in (await manager.list_files("t1"))[0]}  # seeded already
    assert manager.pool.refilling is not None
    await manager.pool.refilling
    assert manager.pool.count() == 2
    # The claimed sandbox is the thread's from now on: found by name after a restart.
    restarted = SandboxManager(
        SandboxProvider(provider.engine, image=provider.image, owner=owner, limits=provider.limits)
    )
    assert (await restarted.acquire("t1")).id == container.id
    # A thread that already has a sandbox keeps it rather than taking a warm one.
    assert (await manager.acquire("t1")).id == container.id and manager.pool.count() == 2


async def test_pool_members_are_as_ready_as_the_traffic_needs(
    provider: SandboxProvider,
) -> None:
    """Before any claim, half the pool is warmed with the engine too (readiness.py: Laplace's
    one half); the rest only to build. A member warmed to build runs a workflow all the same,
    its engine loaded on the first run, and that claim counts as one that used the engine. A
    sandbox made on demand has neither thread until its first build, and the warm-up leaves
    the workspace as seeded."""
    manager = SandboxManager(provider, pool_size=2)
    try:
        await manager.pool.fill()
        assert [e.readiness for e in manager.pool.members] == [Readiness.VERIFY, Readiness.BUILD]
        pids = {}
        for entry in manager.pool.members:
            assert entry.worker is not None
            stats = await asyncio.to_thread(entry.worker.call, "stats")
            verify = entry.readiness == Readiness.VERIFY
            assert stats["threads"] == {"compiler": True, "engine": verify}
            pids[entry.container.id] = stats["pid"]
        manager.pool.size = 0  # claims take the members, nothing refills
        verifier = await manager.acquire("verifier")
        builder = await manager.acquire("builder")
        assert {verifier.id, builder.id} == set(pids)
        seeded = {e.path for e in (await manager.list_files("builder", recursive=True))[0]}
        assert not any("warm" in path for path in seeded)
        # The build-only member builds at once, in the process the warm-up ran in, and runs.
        await manager.write_file(
            "builder", "src/a.workflow.ts", (BIN_DIR / "warm.workflow.ts").read_bytes()
        )
        built = await manager.toolchain("builder").compile("src/a.workflow.ts")
        assert built.ok, built
        assert (await manager.operation("builder", "stats"))["threads"]["engine"] is False
        ran = await manager.toolchain("builder").execute(
            built.workflow, execution_id="first", pin_data=built.fixtures
        )
        assert ran.status == "success", ran
        after = await manager.operation("builder", "stats")
        assert after["threads"]["engine"] is True and after["pid"] == pids[builder.id]
        assert manager.pool.readiness.snapshot() == {
            "claims": 2,
            "usedEngine": 1,
            "engineShare": 0.5,
        }
        fresh = await manager.acquire("fresh")  # no pool left: made on demand
        assert fresh.id not in pids
        on_demand = await manager.operation("fresh", "stats")
        assert on_demand["threads"] == {"compiler": False, "engine": False}
    finally:
        await manager.close()


def test_the_pool_mix_follows_what_claimed_sandboxes_did() -> None:
    """The share of members warmed with the engine is the claimed ones' (Laplace's rule over
    the last `window` claims): all building only brings it toward none, all running toward
    all, and only the last `window` claims count."""
    mix = ReadinessMix(window=10)
    assert mix.next_member(pool_size=4, ready_to_verify=1) == Readiness.VERIFY  # 2 of 4
    assert mix.next_member(pool_size=4, ready_to_verify=2) == Readiness.BUILD
    for _ in range(10):
        mix.claimed()
    assert mix.engine_share == 1 / 12
    assert mix.next_member(pool_size=4, ready_to_verify=0) == Readiness.BUILD
    for _ in range(10):
        mix.claimed().used_engine = True
    assert mix.engine_share == 11 / 12  # the building-only claims fell out of the window
    assert mix.next_member(pool_size=4, ready_to_verify=3) == Readiness.VERIFY
    assert mix.next_member(pool_size=4, ready_to_verify=4) == Readiness.BUILD


async def test_a_worker_past_its_memory_bound_recycles_its_threads_and_keeps_building(
    provider: SandboxProvider, docker_engine: DockerEngine
) -> None:
    """With a bound below what a loaded compiler holds, the worker ends its threads (at
    most once per 20 calls) and the builds after it still succeed on fresh ones."""
    manager = SandboxManager(provider)
    try:
        await manager.write_file(
            "t1", "src/a.workflow.ts", (BIN_DIR / "warm.workflow.ts").read_bytes()
        )
        container = await manager.acquire("t1")
        worker = await asyncio.to_thread(
            WorkerClient.start, docker_engine, container.id, recycle_mb=1
        )
        try:
            for _ in range(25):
                built = await asyncio.to_thread(
                    worker.call,
                    "compile",
                    path="src/a.workflow.ts",
                    timeoutMs=20000,
                    maxBytes=1 << 20,
                )
                assert built["ok"], built
            stats = await asyncio.to_thread(worker.call, "stats")
            assert stats["recycled"] == 1
        finally:
            worker.close()
        # The default bound is far above a worker's size: the manager's worker never recycles.
        for _ in range(25):
            assert (await manager.toolchain("t1").compile("src/a.workflow.ts")).ok
        assert (await manager.operation("t1", "stats"))["recycled"] == 0
    finally:
        await manager.close()


BARE_WORKFLOW = b"""import { trigger, workflow } from '@n8n/workflow-sdk';
const start = trigger({
  type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' },
});
export default workflow('bare', 'Bare').add(start);
"""


async def test_a_fresh_thread_loading_its_modules_is_not_charged_to_the_call_deadline(
    provider: SandboxProvider,
) -> None:
    """A cold worker's first compile and first run load the SDK (~1 s) and the engine
    (~1.7 s) before they start: deadlines shorter than those loads still hold for the calls.
    The workflow is a bare trigger, so that the first call's own work (a node's class, the
    Code node's context: ~0.25 s for the warm-up workflow) stays well inside its deadline on a
    busy machine too."""
    manager = SandboxManager(provider)
    try:
        await manager.write_file("t1", "src/a.workflow.ts", BARE_WORKFLOW)
        assert (await manager.operation("t1", "stats"))["threads"] == {
            "compiler": False,
            "engine": False,
        }
        built = await manager.toolchain("t1").compile("src/a.workflow.ts", timeout_s=0.5)
        assert built.ok, built
        ran = await manager.toolchain("t1").execute(
            built.workflow, execution_id="e1", pin_data=built.fixtures, timeout_s=0.5
        )
        assert ran.ok and ran.status == "success", ran
        # A call that is itself too slow still meets its deadline.
        await manager.write_file(
            "t1", "src/loop.workflow.ts", b"while (true) {}\nexport default 1;\n"
        )
        stuck = await manager.toolchain("t1").compile("src/loop.workflow.ts", timeout_s=0.5)
        assert stuck.stage == "timeout" and "did not finish within 500 ms" in stuck.message
    finally:
        await manager.close()


async def test_a_restart_adopts_the_pool_and_the_janitor_leaves_it_alone(
    provider: SandboxProvider, owner: str
) -> None:
    first = SandboxManager(provider, pool_size=2)
    await first.pool.fill()
    await first.close()
    adopted = {c.id for c in provider.pooled()}
    second = SandboxManager(provider, pool_size=2)
    await second.pool.fill()
    assert {c.id for c in provider.pooled()} == adopted  # adopted, none created
    assert (await second.janitor()).removed_sandboxes == []
    assert len(provider.pooled()) == 2


async def test_a_service_that_stops_leaves_nothing_running_and_keeps_the_threads_files(
    provider: SandboxProvider, owner: str
) -> None:
    """The service's stop (SIGTERM) removes its pool and stops the sandboxes of its threads
    (an engine without snapshots keeps their files); the next process starts them again."""
    first = SandboxManager(provider, pool_size=1)
    try:
        await first.pool.fill()
        assert (await first.run_command("t1", "echo kept > kept.txt")).success
        if first.pool.refilling is not None:
            await first.pool.refilling  # the claim's refill: a member to remove
        assert first.pool.count() == 1
    finally:
        await first.shutdown()
    owned = provider.engine.containers({identity.LABEL_OWNER: owner})
    assert [c.name for c in owned] == [provider.container("t1").name]
    assert owned[0].status == "exited"
    second = SandboxManager(provider)
    try:
        assert (await second.run_command("t1", "cat kept.txt")).stdout == "kept\n"
    finally:
        await second.close()


async def test_destroying_a_claimed_pool_sandbox_removes_its_workspace(
    provider: SandboxProvider, docker_client: docker.DockerClient
) -> None:
    manager = SandboxManager(provider, pool_size=1)
    await manager.pool.fill()
    await manager.acquire("t1")
    info = provider.get("t1")
    assert info is not None and "-ws-" in info.volume_name
    await manager.destroy("t1")
    with pytest.raises(docker.errors.NotFound):
        docker_client.volumes.get(info.volume_name)
    await manager.close()


async def test_the_seeded_workspace_builds_its_template_with_the_one_shot_path(
    provider: SandboxProvider,
) -> None:
    """A command (a job uid) can write into the seeded folders, the node type index lists the
    catalog, and build.mjs compiles the knowledge-base template with the real SDK."""
    manager = SandboxManager(provider)
    result = await manager.run_command(
        "t1",
        "cp knowledge-base/templates/order-router.workflow.ts src/ && "
        "node --import tsx build.mjs src/order-router.workflow.ts --out src/order-router.json",
        timeout_s=120,
    )
    assert result.success, result.stderr
    assert '"ok":true' in result.stderr
    built = json.loads(await manager.read_file("t1", "src/order-router.json"))
    assert {n["name"] for n in built["nodes"]} == {
        "Start",
        "Label Order",
        "Is Large?",
        "Large Order",
        "Small Order",
    }
    index = (await manager.read_file("t1", "node-types/index.txt")).decode().splitlines()
    types = {line.split("\t")[0]: line.split("\t") for line in index}
    assert len([t for t in types if t.startswith("n8n-nodes-base.")]) == 444
    assert types["n8n-nodes-base.set"][2] == "1,2,3,3.1,3.2,3.3,3.4,3.5"
    assert "@n8n/n8n-nodes-langchain.agent" in types  # the catalog-only AI nodes too


async def test_pooled_sandboxes_of_an_older_image_are_discarded(
    provider: SandboxProvider, docker_client: docker.DockerClient, owner: str
) -> None:
    first = SandboxManager(provider, pool_size=1)
    await first.pool.fill()
    await first.close()
    old = {c.id for c in provider.pooled()}
    # The same sandboxes seen by a process whose image is another one.
    docker_client.images.get(provider.image).tag("instance-ai-sandbox", "newer-test-" + owner)
    newer = SandboxProvider(
        provider.engine,
        image=f"instance-ai-sandbox:newer-test-{owner}",
        owner=owner,
        limits=provider.limits,
    )
    try:
        second = SandboxManager(newer, pool_size=1)
        await second.pool.fill()
        fresh = {c.id for c in newer.pooled()}
        assert len(fresh) == 1 and not fresh & old
        await second.close()
    finally:
        for container in newer.pooled():
            newer.discard(container)
        docker_client.images.remove(f"instance-ai-sandbox:newer-test-{owner}")


TEMPLATE = "knowledge-base/templates/order-router.workflow.ts"


@pytest.mark.parametrize("use_worker", [True, False], ids=["worker", "one-shot-fallback"])
async def test_compile_returns_workflow_json_with_fixtures_apart(
    provider: SandboxProvider, use_worker: bool
) -> None:
    manager = SandboxManager(provider, use_worker=use_worker)
    built = await manager.toolchain("t1").compile(TEMPLATE, timeout_s=20)
    assert built.ok, built
    assert {n["name"] for n in built.workflow["nodes"]} == {
        "Start",
        "Label Order",
        "Is Large?",
        "Large Order",
        "Small Order",
    }
    assert "pinData" not in built.workflow  # fixtures are never part of the workflow
    assert built.fixtures == {
        "Start": [{"orderId": "A-1", "amount": 250}, {"orderId": "A-2", "amount": 40}]
    }
    assert built.issues == []
    assert built.source_hash is not None and len(built.source_hash) == 64
    assert built.typed is False


async def test_compile_sees_every_edit(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider)
    source = (await manager.read_file("t1", TEMPLATE)).decode()
    for name in ("First Name", "Second Name", "Third Name"):
        await manager.write_file(
            "t1", "src/w.workflow.ts", source.replace("Large Order", name).encode()
        )
        built = await manager.toolchain("t1").compile("src/w.workflow.ts")
        assert name in {n["name"] for n in built.workflow["nodes"]}


async def test_compile_failures_are_reported_by_stage_and_an_endless_loop_is_cut_off(
    provider: SandboxProvider,
) -> None:
    manager = SandboxManager(provider)
    await manager.write_file("t1", "src/broken.workflow.ts", b"export default {\n  oops: ,\n};\n")
    broken = await manager.toolchain("t1").compile("src/broken.workflow.ts")
    assert (broken.ok, broken.stage) == (False, "load")
    assert "broken.workflow.ts(2," in broken.message
    await manager.write_file("t1", "src/none.workflow.ts", b"export default 42;\n")
    assert (await manager.toolchain("t1").compile("src/none.workflow.ts")).stage == "export"
    await manager.write_file(
        "t1", "src/hang.workflow.ts", b"while (Date.now() > 0) {}\nexport default 1;\n"
    )
    started = time.monotonic()
    hung = await manager.toolchain("t1").compile("src/hang.workflow.ts", timeout_s=1)
    assert (hung.ok, hung.stage) == (False, "timeout")
    assert time.monotonic() - started < 10
    # The worker lives on, the next build works, and the cut-off thread left no zombie.
    assert (await manager.toolchain("t1").compile(TEMPLATE)).ok
    container = await manager.acquire("t1")
    assert not [s for s in sh(container, "ps -eo stat=").split() if s.startswith("Z")]
    await manager.write_file(
        "t1",
        "src/w.json",
        json.dumps({"name": "J", "nodes": [], "connections": {}, "pinData": {"A": [{}]}}).encode(),
    )
    parsed = await manager.toolchain("t1").compile("src/w.json")
    assert parsed.ok and parsed.workflow["name"] == "J" and parsed.fixtures == {"A": [{}]}


async def _refuse(_thread: str, _host: str, _port: int) -> str:
    return "nothing may leave in this test"


async def test_sandboxes_of_another_process_layout_get_an_egress_of_ours(
    docker_client: docker.DockerClient,
    sandbox_image: BuiltImage,
    owner: str,
    sandbox_limits: SandboxLimits,
) -> None:
    """A service with another data directory (same owner) neither claims a pooled sandbox
    whose egress directory it cannot serve nor breaks on a thread's: it makes them again."""
    with (
        tempfile.TemporaryDirectory(prefix="eg-") as first_root,
        tempfile.TemporaryDirectory(prefix="eg-") as second_root,
    ):
        engine = DockerEngine(docker_client)
        first = SandboxProvider(
            engine,
            image=sandbox_image.tag,
            owner=owner,
            egress_root=Path(first_root),
            limits=sandbox_limits,
        )
        before = SandboxManager(first, pool_size=1, egress=EgressProxy(_refuse))
        await before.pool.fill()
        await before.write_file("kept", "notes.md", b"mine")
        await before.close()
        theirs = {c.id for c in first.pooled()}

        second = SandboxProvider(
            engine,
            image=sandbox_image.tag,
            owner=owner,
            egress_root=Path(second_root),
            limits=sandbox_limits,
        )
        after = SandboxManager(second, pool_size=1, egress=EgressProxy(_refuse))
        try:
            await after.pool.fill()
            ours = {c.id for c in second.pooled()}
            assert len(ours) == 1 and not ours & theirs
            result = await after.run_command("fresh", "echo ok")  # claims the pooled one
            assert (result.exit_code, result.stdout) == (0, "ok\n")
            assert await after.read_file("kept", "notes.md") == b"mine"  # same workspace
            assert (
                Path(second_root) / second.container("kept").labels[identity.LABEL_EGRESS]
            ).is_dir()
        finally:
            await after.close()


SWAP_LOOP = (
    "mkdir -p /tmp/outside && chmod 777 /tmp/outside; mkdir -p race; cd race; "
    "end=$(( $(date +%s) + 20 )); while [ $(date +%s) -lt $end ]; do "
    "mkdir -p real; mv -T real dir 2>/dev/null; mv -T dir real 2>/dev/null; "
    "ln -sfn /tmp/outside dir; rm -f dir; done"
)


@pytest.mark.attack
async def test_a_folder_swapped_for_a_symlink_mid_write_never_redirects_it(
    provider: SandboxProvider,
) -> None:
    """A command keeps swapping `race/dir` between a folder and a symlink out of the
    workspace while the file tools write and read through it: nothing may land outside."""
    manager = SandboxManager(provider)
    swapping = asyncio.ensure_future(manager.run_command("t1", SWAP_LOOP, timeout_s=30))
    await asyncio.sleep(0.5)
    outcomes: Counter[str] = Counter()
    for n in range(300):
        try:
            await manager.write_file("t1", f"race/dir/f{n}.txt", b"x")
            outcomes["written"] += 1
        except (PathEscapeError, WorkspaceFileNotFoundError) as refused:
            outcomes[type(refused).__name__] += 1
        with contextlib.suppress(PathEscapeError, WorkspaceFileNotFoundError):
            await manager.read_file("t1", "race/dir/../dir/f0.txt")
    swapping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await swapping
    container = await manager.acquire("t1")
    assert sh(container, "ls -A /tmp/outside").strip() == "", outcomes
    assert sum(outcomes.values()) == 300 and outcomes["written"] > 0, outcomes
    await manager.close()


@pytest.mark.attack
async def test_a_workspace_cannot_grow_past_its_limit_and_says_so(
    docker_client: docker.DockerClient,
    sandbox_image: BuiltImage,
    owner: str,
    sandbox_limits: SandboxLimits,
) -> None:
    # A workspace made before the limit keeps its files when it gets one.
    before = SandboxManager(
        SandboxProvider(
            DockerEngine(docker_client),
            image=sandbox_image.tag,
            owner=owner,
            limits=sandbox_limits,
        )
    )
    await before.write_file("t1", "old.md", b"from before")
    await before.close()
    before.engine.remove(before.provider.container("t1").id)  # the volume stays

    limited = SandboxProvider(
        DockerEngine(docker_client),
        image=sandbox_image.tag,
        owner=owner,
        disks=WorkspaceDisks(64 * 1024 * 1024),
        limits=sandbox_limits,
    )
    manager = SandboxManager(limited)
    assert await manager.read_file("t1", "old.md") == b"from before"
    volume = next(
        mount["Name"]
        for mount in docker_attrs(limited.container("t1"))["Mounts"]
        if mount["Destination"] == WORKSPACE
    )
    data_dir = Path(docker_client.volumes.get(volume).attrs["Mountpoint"])
    assert os.path.ismount(data_dir)
    # Sparse: the host holds what the workspace holds, not the limit.
    assert (data_dir.parent / "workspace.ext4").stat().st_blocks * 512 < 16 * 1024 * 1024
    filled = await manager.run_command("t1", "head -c 100000000 /dev/zero > big; echo $?")
    assert filled.exit_code == 0 and filled.stdout.strip() != "0"  # cut off by the kernel
    failed = await manager.run_command("t1", "head -c 100000000 /dev/zero > big2")
    assert failed.exit_code != 0
    assert "the workspace is full: it holds at most 64 MiB" in failed.stderr
    with pytest.raises(WorkspaceFullError, match="INSTANCE_AI_SANDBOX_WORKSPACE_MAX_MB"):
        await manager.write_file("t1", "note.md", b"x" * 200_000)
    await manager.run_command("t1", "rm -f big big2")
    await manager.write_file("t1", "note.md", b"room again")
    await manager.destroy("t1")
    assert not os.path.ismount(data_dir) and not data_dir.exists()
    await manager.close()
