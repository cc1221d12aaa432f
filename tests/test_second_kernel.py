"""Attacks only a second kernel stops: what a sandbox learns of the host's kernel, and which
system calls reach it. Part of the attack suite, run under each runtime (the suite's runtime
is INSTANCE_AI_SANDBOX_RUNTIME, tests/sandbox_fixtures.py): under runsc (gVisor) the
sandbox's own kernel answers every call and the host's stays out of sight; under runc the
host's kernel answers what Docker's seccomp profile lets through, which these tests pin
(docs/security.md, "The second kernel", has the table).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sandbox.provider import SandboxProvider
from sandbox.runtimes import RUNSC

pytestmark = pytest.mark.attack

PROBE = (Path(__file__).parent / "kernel_probe.py").read_text()
# Calls nothing in a sandbox may make succeed, whichever kernel answers: each would change
# or read something beyond the sandbox.
REFUSED_EVERYWHERE = (
    "unshare (mount namespace)",
    "bpf (map create)",
    "mount (tmpfs)",
    "kexec_load",
    "init_module",
    "clock_settime",
    "perf_event_open",
)
# What Docker's default seccomp profile lets through to the host's kernel, of the probe's
# calls that a sandbox has no need of: io_uring (a long list of kernel bugs) and ptrace.
THROUGH_SECCOMP = ("io_uring_setup", "ptrace (traceme)")


def probe(provider: SandboxProvider, thread_id: str) -> dict[str, Any]:
    container = provider.ensure(thread_id)
    result = provider.engine.exec(container.id, ["python3", "-c", PROBE], workdir="/")
    assert result.exit_code == 0, result.stderr.decode()
    facts: dict[str, Any] = json.loads(result.stdout)
    return facts


def served(facts: dict[str, Any]) -> list[str]:
    return [name for name, answer in facts["calls"].items() if answer["ret"] != -1]


def test_the_host_kernel_stays_out_of_sight(provider: SandboxProvider) -> None:
    facts = probe(provider, "kernel-facts")
    host_release = os.uname().release
    host_disks = sorted(os.listdir("/sys/block"))
    if provider.limits.runtime == RUNSC:
        # The kernel that answers is gVisor's: its own version and boot log, no host paths,
        # none of the host's disks (nor the loop devices of other sandboxes' workspaces).
        assert facts["release"] != host_release and host_release not in facts["version"]
        assert "gVisor" in facts["dmesg"]
        assert "/var/lib/docker" not in facts["mountinfo"]
        assert facts["sys_block"] == []
    else:
        # The host's kernel answers: its exact build, Docker's storage paths, every block
        # device of the host, the other sandboxes' workspace loop devices among them. Only
        # its log is held back (seccomp refuses syslog).
        assert facts["release"] == host_release
        assert facts["calls"]["syslog (dmesg)"]["errno"] == "EPERM"
        assert "/var/lib/docker" in facts["mountinfo"]
        assert facts["sys_block"] == host_disks


def test_no_system_call_of_a_sandbox_reaches_the_host_kernel_under_gvisor(
    provider: SandboxProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = probe(provider, "kernel-calls")
    calls = facts["calls"]
    for name in REFUSED_EVERYWHERE:
        assert calls[name]["ret"] == -1, f"{name} succeeded in a sandbox: {calls[name]}"
    if provider.limits.runtime == RUNSC:
        # The same process's uname came back from gVisor (the test above): every call of
        # it was served by the sandbox's kernel, and none by the host's.
        assert facts["release"] != os.uname().release
        reaching_host: list[str] = []
        # What gVisor does not implement at all, it refuses: no io_uring, no userfaultfd.
        assert calls["io_uring_setup"]["errno"] == "ENOSYS"
        assert calls["userfaultfd"]["errno"] == "ENOSYS"
        # A user namespace is gVisor's to give (its own kernel's, unprivileged on the host).
        assert calls["unshare (user namespace)"]["ret"] == 0
    else:
        assert facts["seccomp"] == "2"  # Docker's filter, in front of the host's kernel
        reaching_host = served(facts)
        for name in THROUGH_SECCOMP:
            assert name in reaching_host, f"{name} no longer reaches the host kernel: {calls}"
        assert calls["unshare (user namespace)"]["errno"] == "EPERM"
        assert calls["keyctl (session keyring)"]["errno"] == "EPERM"
    with capsys.disabled():
        print(
            f"\nsystem calls reaching the host kernel under {provider.limits.runtime}: "
            f"{len(reaching_host)} of {len(calls)} probed ({', '.join(reaching_host) or 'none'})"
        )
