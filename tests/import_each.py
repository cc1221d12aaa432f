"""Imports each module named on the command line in a process of its own that holds none of the
product's modules, and prints a JSON object of the ones that failed (module → the error's last
line). Run by tests/test_imports.py.

A fresh interpreter per module costs seconds each (the libraries: pydantic models, gRPC,
SQLAlchemy), hundreds of times over. So this process imports the libraries the product's
modules import (read from their source), none of the product's own, and forks a child per
module: each child starts where a fresh interpreter would be once its libraries are loaded, and
a cycle among the product's modules, or an import that only works after another, fails in it
as it would there.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import os
import sys
import traceback
from pathlib import Path

# Children at once (the suite's other worker has the other core).
AT_ONCE = 2


def _libraries(modules: list[str], product: set[str]) -> list[str]:
    """The modules outside the product that the product's modules import (absolute imports,
    at any depth of their source)."""
    found: set[str] = set()
    for module in modules:
        for node in ast.walk(ast.parse(_source(module).read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
    return sorted(name for name in found if name.split(".")[0] not in product)


def _source(module: str) -> Path:
    """A module's file, found on the path without importing its package."""
    relative = Path(*module.split("."))
    for entry in sys.path:
        for candidate in (relative.with_suffix(".py"), relative / "__init__.py"):
            path = Path(entry or ".") / candidate
            if path.is_file():
                return path
    raise FileNotFoundError(f"no source for {module} on the path")


def _import_in_child(module: str, report: int) -> None:
    """In the forked child: import `module`, write the failure (if any) to `report`, exit."""
    code = 0
    try:
        importlib.import_module(module)
    except BaseException:
        code = 1
        os.write(report, traceback.format_exc().strip().splitlines()[-1].encode())
    finally:
        os._exit(code)


def main(modules: list[str], product: set[str]) -> dict[str, str]:
    for library in _libraries(modules, product):
        # A library the product imports only where it is installed (optional): its own
        # import tells in the child.
        with contextlib.suppress(Exception):
            importlib.import_module(library)
    assert not any(name.split(".")[0] in product for name in sys.modules), "a product module"
    failures: dict[str, str] = {}
    running: dict[int, tuple[str, int]] = {}
    pending = list(modules)
    while pending or running:
        while pending and len(running) < AT_ONCE:
            module = pending.pop(0)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _import_in_child(module, write)
            os.close(write)
            running[pid] = (module, read)
        pid, status = os.wait()
        if pid not in running:  # a process a library started
            continue
        module, read = running.pop(pid)
        with os.fdopen(read, "rb") as said:
            error = said.read().decode(errors="replace")
        if os.waitstatus_to_exitcode(status) != 0:
            failures[module] = error or f"exit status {status}"
    return failures


if __name__ == "__main__":
    product_packages, *names = sys.argv[1:]
    print(json.dumps(main(names, set(product_packages.split(",")))))
