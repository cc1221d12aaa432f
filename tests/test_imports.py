"""Every module of the product imports on its own, in a fresh interpreter: a cycle hidden
behind a package's `__init__` (or an import that only works after another) fails here."""

from __future__ import annotations

import ast
import json
import os
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


# A process per module that holds none of the product's modules (a module imported after
# another could hide a cycle): tests/import_each.py forks each from one holding the libraries.
# In four batches, so that a failure names a quarter of the modules.
@pytest.mark.parametrize("batch", range(4))
def test_each_module_imports_in_a_fresh_interpreter(batch: int) -> None:
    modules = product_modules()[batch::4]
    done = subprocess.run(
        [sys.executable, "-m", "tests.import_each", ",".join(PACKAGES), *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {}


def test_an_import_that_only_works_after_another_fails_on_its_own(tmp_path: Path) -> None:
    """The check above catches what it is for: a module that imports cleanly only once
    another module of the product was imported first."""
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    # a imports b before it defines what b takes from it: a alone fails (a partly
    # initialised); b alone works, and so does a once b was imported.
    (package / "a.py").write_text("import cyclic.b\n\nA = 1\n")
    (package / "b.py").write_text("from cyclic.a import A\n\nB = A\n")
    done = subprocess.run(
        [sys.executable, "-m", "tests.import_each", "cyclic", "cyclic.a", "cyclic.b"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout)
    assert set(failures) == {"cyclic.a"}, failures
    assert "partially initialized module" in failures["cyclic.a"], failures


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
