"""Run inside a sandbox (`python3 -c`, as the sandbox user): what the kernel that answers the
sandbox's system calls gives away, and which calls it serves. Prints one JSON object.

Standalone (the image's python3, its standard library alone), x86_64 system call numbers.
Every call is made with arguments that change nothing outside the sandbox; those that could
change the probe itself run in a child process.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
from typing import Any

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(number: int, *args: Any) -> tuple[int, str | None]:
    """(return value, errno name or None)."""
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *args)
    code = ctypes.get_errno()
    return result, (errno.errorcode.get(code, str(code)) if result == -1 else None)


def in_child(number: int, *args: Any) -> tuple[int, str | None]:
    """The call made by a child that exits right after (it may change the caller)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        os.write(writer, json.dumps(call(number, *args)).encode())
        os._exit(0)
    os.close(writer)
    data = os.read(reader, 4096)
    os.waitpid(pid, 0)
    ret, err = json.loads(data)
    return int(ret), err


def buffer(data: bytes = b"", size: int = 0) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(data, max(size, len(data)))


def read(path: str, limit: int = 4096) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode(errors="replace")
    except OSError as exc:
        return f"error: {errno.errorcode.get(exc.errno or 0, exc.errno)}"


def listing(path: str) -> list[str] | str:
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return f"error: {errno.errorcode.get(exc.errno or 0, exc.errno)}"


PERF_ATTR = struct.pack("<IIQ", 1, 128, 0) + bytes(112)  # software cpu-clock, size 128
BPF_MAP = struct.pack("<IIIII", 1, 4, 4, 1, 0) + bytes(108)  # a one-entry hash map
SYSLOG_READ_ALL, LOG = 3, buffer(size=8192)

calls: dict[str, tuple[Any, ...]] = {
    # Kernel facts and identity.
    "uname": (63, buffer(size=390 * 2)),
    "syslog (dmesg)": (103, SYSLOG_READ_ALL, LOG, 8192),
    # Isolation: each either stays inside the sandbox's kernel or reaches the host's.
    "ptrace (traceme)": ("child", 101, 0, 0, 0, 0),
    "unshare (user namespace)": ("child", 272, 0x10000000),
    "unshare (mount namespace)": ("child", 272, 0x00020000),
    "keyctl (session keyring)": (250, 0, ctypes.c_long(-3), 1),
    "add_key": (248, b"user", b"probe", b"x", 1, ctypes.c_long(-2)),
    "perf_event_open": (298, buffer(PERF_ATTR), 0, -1, -1, 0),
    "io_uring_setup": (425, 1, buffer(size=120)),
    "bpf (map create)": (321, 0, buffer(BPF_MAP), 128),
    "userfaultfd": (323, 0),
    "mount (tmpfs)": (165, b"none", b"/tmp", b"tmpfs", 0, None),
    "open_by_handle_at": (304, -100, buffer(size=128), 0),
    "kexec_load": (246, 0, 0, None, 0),
    "init_module": (175, None, 0, b""),
    "clock_settime": (227, 0, buffer(size=16)),
    "process_vm_readv (self)": (310, os.getpid(), None, 0, None, 0, 0),
    "fanotify_init": (300, 0, 0),
    "personality (query)": (135, 0xFFFFFFFF),
    "memfd_create": (319, b"probe", 0),
    "getrandom": (318, buffer(size=16), 16, 0),
}

results: dict[str, dict[str, Any]] = {}
for name, spec in calls.items():
    if spec[0] == "child":
        ret, err = in_child(*spec[1:])
    else:
        ret, err = call(*spec)
    results[name] = {"ret": ret, "errno": err}

print(
    json.dumps(
        {
            "release": os.uname().release,
            "version": read("/proc/version").strip(),
            "dmesg": LOG.value.decode(errors="replace")[:2000],
            "mountinfo": read("/proc/self/mountinfo", 65536),
            "sys_block": listing("/sys/block"),
            "sys_firmware": listing("/sys/firmware"),
            "seccomp": next(
                (
                    line.split()[1]
                    for line in read("/proc/self/status").splitlines()
                    if line.startswith("Seccomp:")
                ),
                None,
            ),
            "calls": results,
        }
    )
)
