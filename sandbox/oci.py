"""OCI bundles for the runsc engine: the image's root filesystem exported once per image (shared
read-only by every container made from it) and each container's `config.json`, made to the
same hardening Docker gives a sandbox (read-only root, uid 1000, no capabilities,
no-new-privileges, an init as PID 1, a private /tmp, cgroup limits): the spec Docker writes for
one is the reference (docs/security.md, "The runsc engine").
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandbox.engine import ContainerSpec, SandboxLimits
from sandbox.errors import SandboxUnavailableError
from sandbox.job_launcher import launcher_process
from sandbox.runtimes import GVISOR_HOST_PIDS_FACTOR, GVISOR_KERNEL_MEMORY

__all__ = ["INIT", "ExportedImage", "bundle_config", "export_image"]

# The host's static tini, bind-mounted as the container's PID 1 (as Docker's `--init` does):
# it reaps orphans, which would otherwise fill the pids limit as zombies.
INIT_SOURCE = Path("/usr/bin/tini-static")
INIT = "/sbin/docker-init"
# What a container's own processes are started with where the image says nothing.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEV_SIZE = "65536k"
SHM_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class ExportedImage:
    """An image's root filesystem on this host, and what its config says a process gets."""

    image: str
    rootfs: Path
    env: dict[str, str]
    command: list[str]
    working_dir: str


def export_image(client: docker.DockerClient, image: str, cache_root: Path) -> ExportedImage:
    """The image's root filesystem under `cache_root`, exported from Docker the first time
    (to a temporary directory renamed into place: a half export is never used)."""
    try:
        found = client.images.get(image)
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"the sandbox image {image} is missing: {exc}") from exc
    image_id = str(found.id).removeprefix("sha256:")[:16]
    target = cache_root / image_id
    meta = target / "image.json"
    if not meta.is_file():
        _export(client, image, found.attrs.get("Config") or {}, target)
    data = json.loads(meta.read_text())
    return ExportedImage(
        image=image,
        rootfs=target / "rootfs",
        env=dict(data["env"]),
        command=list(data["command"]),
        working_dir=str(data["workingDir"]),
    )


def _export(client: docker.DockerClient, image: str, config: dict[str, Any], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    container = None
    try:
        (staging / "rootfs").mkdir()
        container = client.containers.create(image, command=["true"], network_mode="none")
        untar = subprocess.Popen(
            ["tar", "-x", "--numeric-owner", "-C", str(staging / "rootfs")],
            stdin=subprocess.PIPE,
        )
        assert untar.stdin is not None
        with untar.stdin:
            for chunk in container.export():
                untar.stdin.write(chunk)
        if untar.wait() != 0:
            raise SandboxUnavailableError(f"unpacking the sandbox image {image} failed")
        env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
        meta = {
            "env": env,
            "command": config.get("Cmd") or ["sleep", "infinity"],
            "workingDir": config.get("WorkingDir") or "/",
        }
        (staging / "image.json").write_text(json.dumps(meta))
        with contextlib.suppress(OSError):
            staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "image.json").is_file():  # else another process was first
                raise
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"exporting the sandbox image {image} failed: {exc}") from exc
    finally:
        if container is not None:
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
        shutil.rmtree(staging, ignore_errors=True)


def bundle_config(
    spec: ContainerSpec,
    image: ExportedImage,
    *,
    hostname: str,
    cgroups_path: str,
    etc_dir: Path,
    volume_dir: Path | None,
    extra_binds: Mapping[Path, str] | None = None,
) -> dict[str, Any]:
    """The OCI runtime spec of a container made from `spec`: `etc_dir` holds its own
    `hosts` and `hostname` files, `volume_dir` is its volume's directory on this host,
    `extra_binds` the engine's own host directories (read-write) by where they go."""
    limits = spec.limits
    uid, gid = (int(part) for part in limits.user.split(":"))
    args = list(spec.command if spec.command is not None else image.command)
    identity: dict[str, Any] = {
        "user": {"uid": uid, "gid": gid, "additionalGids": [gid]},
        "capabilities": {},
    }
    if spec.job_launcher:
        identity = launcher_process(limits.user, args)
        args = identity.pop("args")
    mounts = _base_mounts(etc_dir)
    if limits.init:
        args = [INIT, "--", *args]
        mounts.append(_bind(INIT, INIT_SOURCE, read_only=True))
    if limits.tmp_size:
        # /tmp inside the container, private to it (as Docker's --tmpfs: noexec included).
        options = ["noexec", "nosuid", "nodev", f"size={limits.tmp_size}", "mode=1777"]
        mounts.append(_mount("/tmp", "tmpfs", "tmpfs", options))  # noqa: S108
    if volume_dir is not None:
        mounts.append(_bind(spec.volume_mount, volume_dir))
    mounts += [_bind(path, Path(host)) for host, path in spec.binds.items()]
    mounts += [_bind(path, host) for host, path in (extra_binds or {}).items()]
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            **identity,
            "args": args,
            "env": env_list(image, spec.environment),
            "cwd": spec.working_dir or image.working_dir,
            "rlimits": rlimits(limits),
            "noNewPrivileges": limits.no_new_privileges,
            "terminal": False,
        },
        "root": {"path": str(image.rootfs), "readonly": limits.read_only},
        "hostname": hostname,
        "mounts": mounts,
        "linux": {
            "resources": _resources(limits),
            "cgroupsPath": cgroups_path,
            "namespaces": [{"type": kind} for kind in ("pid", "ipc", "uts", "mount", "network")],
        },
    }


def env_list(image: ExportedImage, environment: Mapping[str, str]) -> list[str]:
    merged = {"PATH": DEFAULT_PATH, **image.env, **environment}
    return [f"{key}={value}" for key, value in merged.items()]


def rlimits(limits: SandboxLimits) -> list[dict[str, Any]]:
    """The processes a uid may have inside the sandbox's kernel: the sandbox's count twice
    over (as Docker's `nproc` ulimit under gVisor, docker_engine.py `_gvisor_limits`)."""
    nproc = limits.pids_limit * 2
    return [{"type": "RLIMIT_NPROC", "hard": nproc, "soft": nproc}]


def _resources(limits: SandboxLimits) -> dict[str, Any]:
    memory = limits.memory_bytes + GVISOR_KERNEL_MEMORY
    period = 100_000
    return {
        "memory": {"limit": memory, "swap": memory},
        "pids": {"limit": limits.pids_limit * GVISOR_HOST_PIDS_FACTOR},
        "cpu": {"quota": int(limits.cpus * period), "period": period},
    }


def _base_mounts(etc_dir: Path) -> list[dict[str, Any]]:
    hardened = ["nosuid", "noexec", "nodev"]
    return [
        _mount("/proc", "proc", "proc", hardened),
        _mount("/dev", "tmpfs", "tmpfs", ["nosuid", "strictatime", "mode=755", f"size={DEV_SIZE}"]),
        _mount("/sys", "sysfs", "sysfs", [*hardened, "ro"]),
        _mount("/dev/shm", "tmpfs", "shm", [*hardened, "mode=1777", f"size={SHM_BYTES}"]),  # noqa: S108
        _bind("/etc/hosts", etc_dir / "hosts", read_only=True),
        _bind("/etc/hostname", etc_dir / "hostname", read_only=True),
    ]


def _mount(destination: str, kind: str, source: str, options: list[str]) -> dict[str, Any]:
    return {"destination": destination, "type": kind, "source": source, "options": options}


def _bind(destination: str, source: Path, *, read_only: bool = False) -> dict[str, Any]:
    return _mount(
        destination, "bind", str(source), ["rbind", "ro" if read_only else "rw", "rprivate"]
    )
