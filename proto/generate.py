"""Generate the code of the gRPC contract from `proto/instance_ai/v1/*.proto`: the Python
modules, and the TypeScript of `clients/typescript` (ts-proto, for @grpc/grpc-js).

Usage::

    python proto/generate.py          # regenerate in place
    python proto/generate.py --check  # exit 1 if the committed code is stale

The generated code (`*_pb2.py`, `*_pb2.pyi`, `*_pb2_grpc.py`, `*_pb2_grpc.pyi`, and
`clients/typescript/src/gen/**.ts`) is committed so that an install needs no code generator;
the check keeps it honest. The TypeScript generator comes from the client's own npm
dependencies (`make client` installs them).
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
CLIENT_DIR = PROTO_ROOT.parent / "clients" / "typescript"
TS_DIR = CLIENT_DIR / "src" / "gen"
TS_PLUGIN = CLIENT_DIR / "node_modules" / ".bin" / "protoc-gen-ts_proto"
# grpc-js service clients; ES modules (hence the .js suffix of imports); Timestamp as Date.
TS_OPTIONS = "outputServices=grpc-js,esModuleInterop=true,importSuffix=.js,env=node,useDate=true"


def _plugin(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        raise SystemExit(f"{name} not found: install the dev extras (pip install -e '.[dev]')")
    return path


def generate(out_dir: Path, ts_dir: Path) -> list[Path]:
    """Run protoc over every .proto file, writing the Python package tree under `out_dir` and
    the TypeScript under `ts_dir` (emptied first: a removed .proto leaves nothing behind)."""
    if not TS_PLUGIN.exists():
        raise SystemExit(f"{TS_PLUGIN} not found: install the client's dependencies (make client)")
    shutil.rmtree(ts_dir, ignore_errors=True)
    ts_dir.mkdir(parents=True)
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
        f"--plugin=protoc-gen-ts_proto={TS_PLUGIN}",
        f"--ts_proto_out={ts_dir}",
        f"--ts_proto_opt={TS_OPTIONS}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")
    python = sorted((out_dir / "instance_ai" / "v1").glob("*_pb2*.py*"))
    return python + sorted(ts_dir.rglob("*.ts"))


def _python_in(directory: Path) -> dict[str, Path]:
    return {p.name: p for p in directory.iterdir() if p.name.endswith(GENERATED_SUFFIXES)}


def _typescript_in(directory: Path) -> dict[str, Path]:
    found = directory.rglob("*.ts") if directory.exists() else []
    return {f"clients/typescript/src/gen/{p.relative_to(directory)}": p for p in found}


def _differences(fresh: dict[str, Path], committed: dict[str, Path]) -> list[str]:
    stale = sorted(fresh.keys() ^ committed.keys())
    stale += sorted(
        name
        for name in fresh.keys() & committed.keys()
        if not filecmp.cmp(fresh[name], committed[name], shallow=False)
    )
    return stale


def check() -> list[str]:
    """Return the generated files that differ from (or are missing in) the committed tree."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh_ts = Path(tmp) / "ts"
        generate(Path(tmp), fresh_ts)
        return _differences(
            _python_in(Path(tmp) / "instance_ai" / "v1"), _python_in(PACKAGE_DIR)
        ) + _differences(_typescript_in(fresh_ts), _typescript_in(TS_DIR))


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
    for path in generate(PROTO_ROOT, TS_DIR):
        print(path.relative_to(PROTO_ROOT.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
