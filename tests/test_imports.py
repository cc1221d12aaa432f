"""Every module of the product imports on its own, in a fresh interpreter: a cycle hidden
behind a package's `__init__` (or an import that only works after another) fails here."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    "server",
    "sandbox",
    "browser_relay",
    "fs_gateway",
    "evals",
    "instance_ai_client",
    "instance_ai_cli",
    "n8n_bridge",
]


def product_modules() -> list[str]:
    modules = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:  # Alembic loads these itself, by path
                continue
            modules.append(".".join(parts).removesuffix(".__init__"))
    return modules


def test_every_package_is_covered() -> None:
    modules = product_modules()
    assert {m.split(".")[0] for m in modules} == set(PACKAGES)
    # The modules a cycle once hid behind `server/runtime/__init__.py`.
    assert {"server.domain.workflows", "server.pipeline.build", "server.wiring"} <= set(modules)


# One interpreter per module (a module imported after another could hide a cycle), in
# batches of processes so the whole set takes seconds.
@pytest.mark.parametrize("batch", range(4))
def test_each_module_imports_in_a_fresh_interpreter(batch: int) -> None:
    modules = product_modules()[batch::4]
    processes = {
        module: subprocess.Popen(
            [sys.executable, "-c", f"import {module}"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for module in modules
    }
    failures = {}
    for module, process in processes.items():
        _out, err = process.communicate(timeout=120)
        if process.returncode != 0:
            failures[module] = err.strip().splitlines()[-1:]
    assert failures == {}


def test_every_module_declares_its_public_names() -> None:
    """`__all__` in every module, naming only what the module has."""
    problems = []
    for module in product_modules():
        path = ROOT / (module.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / module.replace(".", "/") / "__init__.py"
        tree = ast.parse(path.read_text())
        declared = None
        defined = set()
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if "__all__" in names and node.value is not None:
                    declared = ast.literal_eval(node.value)
                defined |= names
            elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        if declared is None:
            problems.append(f"{module}: no __all__")
        else:
            problems += [
                f"{module}: {name} is not defined" for name in declared if name not in defined
            ]
    assert problems == []
