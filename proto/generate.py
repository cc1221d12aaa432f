"""Generate the Python code of the gRPC contract from `proto/instance_ai/v1/*.proto`.

Usage::

    python proto/generate.py          # regenerate in place
    python proto/generate.py --check  # exit 1 if the committed code is stale

The generated modules (`*_pb2.py`, `*_pb2.pyi`, `*_pb2_grpc.py`, `*_pb2_grpc.pyi`) are
committed so that a plain install needs no code generator; the check keeps them honest.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
PACKAGE_DIR = PROTO_ROOT / "instance_ai" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def _plugin(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        raise SystemExit(f"{name} not found: install the dev extras (pip install -e '.[dev]')")
    return path


def generate(out_dir: Path) -> list[Path]:
    """Run protoc over every .proto file, writing the package tree under `out_dir`."""
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PACKAGE_DIR.glob("*.proto"))
    well_known = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out=quiet:{out_dir}",
        f"--mypy_grpc_out=quiet:{out_dir}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")
    return sorted((out_dir / "instance_ai" / "v1").glob("*_pb2*.py*"))


def _generated_in(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.endswith(GENERATED_SUFFIXES)}


def check() -> list[str]:
    """Return the generated files that differ from (or are missing in) the committed tree."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh_dir = Path(tmp) / "instance_ai" / "v1"
        generate(Path(tmp))
        fresh, committed = _generated_in(fresh_dir), _generated_in(PACKAGE_DIR)
        stale = sorted(fresh ^ committed)
        stale += sorted(
            name
            for name in fresh & committed
            if not filecmp.cmp(fresh_dir / name, PACKAGE_DIR / name, shallow=False)
        )
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed code is stale")
    if parser.parse_args().check:
        stale = check()
        if stale:
            print("stale generated code: " + ", ".join(stale), file=sys.stderr)
            print("run `python proto/generate.py` and commit the result", file=sys.stderr)
            return 1
        print("generated code is current")
        return 0
    for path in generate(PROTO_ROOT):
        print(path.relative_to(PROTO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
