"""Which OCI runtime a sandbox runs under: runc (the host's kernel, behind namespaces, seccomp
and cgroups) or runsc (gVisor: a second kernel in user space between the sandbox and the
host's, docs/security.md "The second kernel").

`auto` takes runsc where the engine has it registered, else runc with a warning: a host
without gVisor still gets working sandboxes, and says so at start-up and in health.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, Literal

from sandbox.errors import SandboxUnavailableError

__all__ = [
    "AUTO",
    "GVISOR_HOST_PIDS_FACTOR",
    "GVISOR_JOB_TASKS",
    "GVISOR_KERNEL_MEMORY",
    "RUNC",
    "RUNSC",
    "RuntimeChoice",
    "RuntimeSetting",
    "choose_runtime",
]

RUNC: Final = "runc"
RUNSC: Final = "runsc"
AUTO: Final = "auto"
RuntimeSetting = Literal["auto", "runc", "runsc"]

# What a job (a command and all it starts) keeps to under gVisor, whose host cgroups see the
# sandbox's kernel rather than its processes (`SandboxProvider.job_limits`; measured in
# docs/security.md "The second kernel"). Tasks, threads counted: gVisor's systrap keeps a host
# process per address space a job ever had, and a fork bomb at 128 is swept in ~3 s with the
# sandbox answering at once after, at 256 in ~21 s with the sandbox taking 6-37 s to answer,
# at 512 not within minutes.
GVISOR_JOB_TASKS: Final = 128
# The host's limits of a gVisor sandbox (docker_engine.py `_gvisor_limits`, oci.py): its pids
# limit is this many times the sandbox's (512 sandboxed processes held ~715 host threads,
# docs/security.md), and its memory limit has this much room for the sandbox's kernel above
# the sandbox's own.
GVISOR_HOST_PIDS_FACTOR: Final = 4
GVISOR_KERNEL_MEMORY: Final = 256 * 1024 * 1024


@dataclass(frozen=True)
class RuntimeChoice:
    name: str  # RUNC | RUNSC
    # Why a weaker runtime than asked for (auto without gVisor); None when all is as wanted.
    warning: str | None = None
    # What drives the sandboxes: "docker" (the engine's own runtime) or RUNSC (runsc itself,
    # sandbox/runsc_engine.py).
    driver: str = "docker"


def choose_runtime(
    wanted: RuntimeSetting, available: Collection[str], engine: str = ""
) -> RuntimeChoice:
    """The runtime for sandboxes on an engine (named `engine` in what is said) whose
    registered runtimes are `available`. Raises SandboxUnavailableError when runsc is asked
    for and the engine lacks it."""
    where = f"the Docker engine {engine!r}" if engine else "the Docker engine"
    if wanted == RUNC:
        return RuntimeChoice(RUNC)
    if RUNSC in available:
        return RuntimeChoice(RUNSC)
    if wanted == RUNSC:
        raise SandboxUnavailableError(
            f"{where} has no runtime named runsc (gVisor): install it and "
            "register it with the engine (`make setup` does both: scripts/install-runsc), or "
            "set INSTANCE_AI_SANDBOX_RUNTIME=auto to fall back to runc"
        )
    return RuntimeChoice(
        RUNC,
        warning=f"{where} has no gVisor (runsc): sandboxes there run under "
        "runc and share the host's kernel. Install it (`make setup`: scripts/install-runsc), "
        "or set INSTANCE_AI_SANDBOX_RUNTIME=runc to choose runc knowingly",
    )
