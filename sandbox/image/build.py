"""Build the sandbox image offline, in five layers, each tagged by a hash of its inputs.

1. **base** (`instance-ai-sandbox-base:<hash>`): `docker import` of a root filesystem assembled
   from this host's binaries (`rootfs.py`).
2. **deps** (`instance-ai-sandbox-deps:<hash>`): the lockfile-pinned npm tree, installed on the
   host with `npm ci --ignore-scripts` and copied into a container of the base, committed.
3. **browser** (`instance-ai-sandbox-browser:<hash>`): this host's Chromium with the libraries
   and fonts it needs (`browser.py`), for the sandboxed headless browser.
4. **tools** (`instance-ai-sandbox-tools:<hash>`): what n8n's sandbox service offers its
   assistant (`tools.py`): Node 24 with npm at /opt/node24, `npm pack`ed at the versions and
   integrities pinned in `deps/node-runtime.json`, and this host's python3, rg and curl.
5. **final** (`instance-ai-sandbox:<hash>`): the code in `bin/` with its threads' bundles
   (`bundler/bundle.mjs`, made here on the host), the workspace seed in `seed/` (copied into a
   workspace on first use), plus the run-time config (user, HOME, TMPDIR, n8n's folder, Node 24
   first on PATH), committed the same way; then one warm-up build and run inside it fills
   Node's compile cache (`/opt/app/compile-cache`), which is committed with it and read-only
   from then on. A code change rebuilds only this.

A layer whose tag exists is reused, so a second build does nothing. Copy-and-commit is used
instead of `docker build`: the legacy builder re-sends and re-hashes the whole 600 MB context
even when every step is cached, and BuildKit would need a registry for its frontend.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors

from sandbox.errors import ImageBuildError, SandboxUnavailableError
from sandbox.image import browser, rootfs, tools
from sandbox.image.catalog import CATALOG_PACKAGES, catalog_file

__all__ = [
    "BIN_DIR",
    "CATALOG_ONLY",
    "DEPS_DIR",
    "IMAGE_DIR",
    "NODE_RUNTIME",
    "REPOSITORY",
    "RUN_CONFIG",
    "SEED_DIR",
    "BuiltImage",
    "ImageBuilder",
    "Log",
    "image_tags",
    "node_type_index",
    "require_image",
]

IMAGE_DIR = Path(__file__).resolve().parent
DEPS_DIR = IMAGE_DIR / "deps"
BIN_DIR = IMAGE_DIR / "bin"
BUNDLER = IMAGE_DIR / "bundler" / "bundle.mjs"
FILL_COMPILE_CACHE = IMAGE_DIR / "bundler" / "fill-compile-cache.cjs"
# Each thread's bundle (bin/bundles/<name>.cjs) and the packages it holds with all they reach.
BUNDLES = {"compiler": ["@n8n/workflow-sdk"], "engine": ["n8n-workflow", "n8n-core"]}
# Node's on-disk compile cache, filled at build by a warm-up and shipped in the image: a
# thread's bundle starts from V8's cached code instead of parsing it.
COMPILE_CACHE = f"{rootfs.APP_DIR}/compile-cache"
SEED_DIR = IMAGE_DIR / "seed"
REPOSITORY = "instance-ai-sandbox"
# Packages whose node and credential catalogs (and node definitions) the image carries without
# their code: the AI nodes are authored and validated, never executed (their 1.9 GB tree is not
# installed). Each is `npm pack`ed at a pinned version and integrity.
CATALOG_ONLY = DEPS_DIR / "catalog-packages.json"
# The Node 24 distribution of the tools layer: each package `npm pack`ed at a pinned version
# and integrity, like the catalog-only ones, its `paths` unpacked `into` tools.NODE_DIR.
NODE_RUNTIME = DEPS_DIR / "node-runtime.json"
RUN_CONFIG = [
    f"USER {rootfs.USER_UID}:{rootfs.USER_UID}",
    f"WORKDIR {rootfs.WORKSPACE}",
    "ENV HOME=/home/user",
    # tsx caches under $TMPDIR and n8n writes <folder>/.n8n/config: both must be on the tmpfs,
    # never the read-only root or (silently) the user's workspace.
    "ENV TMPDIR=/tmp",
    "ENV N8N_USER_FOLDER=/tmp/n8n",
    "ENV N8N_LOG_LEVEL=silent",
    "ENV NODE_OPTIONS=--max-old-space-size=768",
    # Node 24 (the tools layer's) is the sandbox's one `node`: the worker, its threads and
    # every command run on it. The base's Node 20 is not on PATH.
    f"ENV PATH={tools.NODE_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    f"ENV NODE_COMPILE_CACHE={COMPILE_CACHE}",
    'CMD ["sleep", "infinity"]',
]

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BuiltImage:
    tag: str
    built_layers: list[str]


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


# What Python leaves beside a module it compiled (pip does, installing the wheel): not an input.
BYTECODE = "__pycache__"


def _tree_bytes(directory: Path) -> bytes:
    return b"".join(
        p.relative_to(directory).as_posix().encode() + b"\0" + p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and BYTECODE not in p.relative_to(directory).parts
    )


def image_tags() -> tuple[str, str, str, str, str]:
    """The base, deps, browser, tools and final tags the current inputs build (no engine
    call)."""
    files = rootfs.collect_files()
    base = _digest(rootfs.inputs_digest(files).encode())
    deps = _digest(base.encode(), (DEPS_DIR / "package.json").read_bytes(), _npm_inputs())
    browser_files = browser.collect_files()
    chromium = _digest(deps.encode(), browser.inputs_digest(browser_files).encode())
    tool_files = tools.collect_files(provided=files.keys() | browser_files.keys())
    toolbox = _digest(
        chromium.encode(), tools.inputs_digest(tool_files).encode(), NODE_RUNTIME.read_bytes()
    )
    final = _digest(
        toolbox.encode(),
        Path(__file__).read_bytes(),  # it stages the layer (and makes the node type index)
        _tree_bytes(BUNDLER.parent),
        json.dumps(BUNDLES).encode(),
        _tree_bytes(BIN_DIR),
        _tree_bytes(SEED_DIR),
        "\n".join(RUN_CONFIG).encode(),
    )
    return (
        f"{REPOSITORY}-base:{base}",
        f"{REPOSITORY}-deps:{deps}",
        f"{REPOSITORY}-browser:{chromium}",
        f"{REPOSITORY}-tools:{toolbox}",
        f"{REPOSITORY}:{final}",
    )


def require_image(client: docker.DockerClient) -> str:
    """The final tag, or SandboxUnavailableError saying how to build it."""
    tag = image_tags()[-1]
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailableError(
            f"the sandbox image {tag} is not built: run `instance-ai sandbox build-image` "
            "(or `make sandbox-image`)"
        ) from None
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"the Docker engine did not answer: {exc}") from exc
    return tag


class ImageBuilder:
    """`ImageBuilder(client, cache_dir).build()` returns the final tag, building what is missing."""

    def __init__(
        self, client: docker.DockerClient, *, cache_dir: Path, log: Log | None = None
    ) -> None:
        self._client = client
        self._cache_dir = cache_dir
        self._log = log or (lambda _message: None)

    def tags(self) -> tuple[str, str, str, str, str]:
        return image_tags()

    def build(self) -> BuiltImage:
        base_tag, deps_tag, browser_tag, tools_tag, final_tag = self.tags()
        if self._exists(final_tag):  # every layer below it exists too: nothing to install
            self._log(f"sandbox image {final_tag} ready")
            return BuiltImage(tag=final_tag, built_layers=[])
        built: list[str] = []
        node_modules = self._node_modules()
        if not self._exists(base_tag):
            self._import_base(base_tag)
            built.append(base_tag)
        if not self._exists(deps_tag):
            self._commit_layer(
                base_tag,
                deps_tag,
                rootfs.APP_DIR,
                node_modules.parent,
                ["node_modules", "package.json", "package-lock.json"],
                [],
            )
            built.append(deps_tag)
        if not self._exists(browser_tag):
            self._commit_browser(deps_tag, browser_tag)
            built.append(browser_tag)
        if not self._exists(tools_tag):
            self._commit_tools(browser_tag, tools_tag)
            built.append(tools_tag)
        if not self._exists(final_tag):
            code_tag = final_tag.replace(f"{REPOSITORY}:", f"{REPOSITORY}-code:", 1)
            with tempfile.TemporaryDirectory() as staging:
                self._log("bundling the compile and engine threads' modules (esbuild)")
                _stage_code(node_modules, Path(staging))
                self._commit_layer(
                    tools_tag,
                    code_tag,
                    rootfs.APP_DIR,
                    Path(staging),
                    ["bin", "seed"],
                    RUN_CONFIG,
                )
            try:
                self._fill_compile_cache(code_tag, final_tag)
            finally:
                self._client.images.remove(code_tag)  # a step, never an image to run
            built.append(final_tag)
        self._log(f"sandbox image {final_tag} ready" + (f" (built {built})" if built else ""))
        return BuiltImage(tag=final_tag, built_layers=built)

    def _exists(self, tag: str) -> bool:
        try:
            self._client.images.get(tag)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.DockerException as exc:
            raise SandboxUnavailableError(f"the Docker engine did not answer: {exc}") from exc
        return True

    def _node_modules(self) -> Path:
        """The npm tree for the lockfile, installed once per lockfile into the cache."""
        lock_hash = _digest(_npm_inputs())
        target = self._cache_dir / f"deps-{lock_hash}"
        if (target / "node_modules" / ".package-lock.json").exists():
            return target / "node_modules"
        staging = self._cache_dir / f"deps-{lock_hash}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy2(DEPS_DIR / name, staging / name)
        self._log("installing the sandbox's npm dependencies (npm ci --ignore-scripts)")
        npm = _host_program("npm")
        result = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=staging,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ImageBuildError(f"npm ci failed:\n{result.stderr[-4000:]}")
        for name, pin in json.loads(CATALOG_ONLY.read_text()).items():
            self._log(f"adding the catalog of {name}@{pin['version']} (npm pack)")
            _unpack_pinned(npm, name, pin, staging / "node_modules" / name)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)  # all or nothing: a half-installed tree is never reused
        return target / "node_modules"

    def _node_runtime(self) -> Path:
        """Node 24 with its npm, laid out as Node's own distribution is, unpacked once per
        set of pins into the cache (a rebuilt tools layer downloads nothing)."""
        target = self._cache_dir / f"node-runtime-{_digest(NODE_RUNTIME.read_bytes())}"
        if target.is_dir():
            return target
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        npm = _host_program("npm")
        for name, pin in json.loads(NODE_RUNTIME.read_text()).items():
            self._log(f"adding {name}@{pin['version']} to {tools.NODE_DIR} (npm pack)")
            _unpack_pinned(npm, name, pin, staging / pin["into"])
        for link, points_to in tools.NODE_LINKS.items():
            if not (staging / link).parent.joinpath(points_to).is_file():
                raise ImageBuildError(f"{link} would point to a missing {points_to}")
            (staging / link).symlink_to(points_to)
        staging.rename(target)  # all or nothing, as the npm tree
        return target

    def _import_base(self, tag: str) -> None:
        self._log(f"importing the base root filesystem as {tag}")
        repository, version = tag.split(":")
        with tempfile.TemporaryDirectory() as tmp:
            tar_path = Path(tmp) / "rootfs.tar"
            rootfs.write_rootfs_tar(rootfs.collect_files(), tar_path)
            with tar_path.open("rb") as data:
                self._client.api.import_image_from_data(
                    data.read(), repository=repository, tag=version
                )
        if not self._exists(tag):
            raise ImageBuildError(f"docker import did not produce {tag}")

    def _commit_layer(
        self,
        parent: str,
        tag: str,
        destination: str,
        source_dir: Path,
        names: list[str],
        changes: list[str],
    ) -> None:
        """Copy `names` from `source_dir` into `destination` of a container of `parent`, then
        commit it as `tag` with Dockerfile `changes`."""

        def write(payload: IO[bytes]) -> None:
            with tarfile.open(fileobj=payload, mode="w") as tar:
                for name in names:
                    tar.add(source_dir / name, arcname=name, filter=_root_owned)

        self._commit_tar(parent, tag, destination, write, changes)

    def _fill_compile_cache(self, parent: str, tag: str) -> None:
        """Run one warm-up build and run in a container of `parent` (as the sandbox user, who
        the cache is keyed to) with Node's compile cache on, and commit it as `tag` with the
        cache made root's and read-only."""
        self._log("filling Node's compile cache with a warm-up build and run")
        container = self._client.containers.create(
            parent,
            command=[
                "node",
                "-e",
                FILL_COMPILE_CACHE.read_text(),
                COMPILE_CACHE,
                str(rootfs.USER_UID),
                f"{rootfs.APP_DIR}/bin/run-op.mjs",
                json.dumps({"op": "warm", "engine": True, "timeoutMs": 120_000}),
            ],
            environment={"NODE_COMPILE_CACHE": ""},  # the root launcher's own: none
            network_mode="none",
            user="0:0",
            tmpfs={"/tmp": ""},  # noqa: S108 (the container's own tmpfs, as a sandbox's)
        )
        try:
            container.start()
            status = container.wait(timeout=600)
            output = container.logs().decode(errors="replace")
            if status.get("StatusCode") != 0 or '"ok":true' not in output:
                raise ImageBuildError(f"the compile cache's warm-up failed:\n{output[-4000:]}")
            # Only the cache goes into the image (a warm-up that wrote elsewhere would ship it).
            stray = [
                change["Path"]
                for change in container.diff() or []
                if not change["Path"].startswith(COMPILE_CACHE)
                and change["Path"] not in (rootfs.APP_DIR, "/opt")
            ]
            if stray:
                raise ImageBuildError(f"the compile cache's warm-up also wrote {stray[:10]}")
            repository, version = tag.split(":")
            container.commit(repository=repository, tag=version, changes=RUN_CONFIG)
        finally:
            container.remove(force=True)

    def _commit_browser(self, parent: str, tag: str) -> None:
        self._log("adding this host's Chromium (the sandboxed browser)")
        files = browser.collect_files()
        self._commit_root_tar(parent, tag, lambda out: browser.write_layer_tar(files, out))

    def _commit_tools(self, parent: str, tag: str) -> None:
        node_runtime = self._node_runtime()
        self._log("adding Node 24 with npm, and this host's python3, rg and curl")
        provided = rootfs.collect_files().keys() | browser.collect_files().keys()
        files = tools.collect_files(provided)
        self._commit_root_tar(
            parent, tag, lambda out: tools.write_layer_tar(files, node_runtime, out)
        )

    def _commit_root_tar(self, parent: str, tag: str, make: Callable[[Path], None]) -> None:
        """Commit the tar `make` writes (paths from `/`) on top of `parent` as `tag`."""
        with tempfile.TemporaryDirectory() as tmp:
            tar_path = Path(tmp) / "layer.tar"
            make(tar_path)

            def write(payload: IO[bytes]) -> None:
                with tar_path.open("rb") as layer:
                    shutil.copyfileobj(layer, payload)

            self._commit_tar(parent, tag, "/", write, [])

    def _commit_tar(
        self,
        parent: str,
        tag: str,
        destination: str,
        write: Callable[[IO[bytes]], None],
        changes: list[str],
    ) -> None:
        """Unpack the tar `write` produces at `destination` in a container of `parent`, then
        commit it as `tag` with Dockerfile `changes`."""
        self._log(f"building layer {tag}")
        container = self._client.containers.create(
            parent, command=["true"], network_mode="none", user="0:0"
        )
        try:
            # Spooled to disk: the dependency tree is ~900 MB.
            with tempfile.TemporaryFile() as payload:
                write(payload)
                payload.seek(0)
                if not container.put_archive(destination, payload):
                    raise ImageBuildError(f"copying into {destination} for {tag} failed")
            repository, version = tag.split(":")
            container.commit(repository=repository, tag=version, changes=changes)
        finally:
            container.remove(force=True)


def _npm_inputs() -> bytes:
    """What the npm tree is made from: the lockfile and the catalog-only pins."""
    return (DEPS_DIR / "package-lock.json").read_bytes() + b"\0" + CATALOG_ONLY.read_bytes()


def _host_program(name: str) -> str:
    """This host's `node`, `npm` or `cc`, which the build runs."""
    found = shutil.which(name)
    if found is None:
        package = "gcc" if name == "cc" else "nodejs and npm"
        raise ImageBuildError(f"{name} is not installed: install Debian's {package}")
    return found


def _unpack_pinned(npm: str, name: str, pin: dict[str, Any], target: Path) -> None:
    """`npm pack` one package at its pinned version, check its integrity, and unpack only the
    pinned paths (a catalog's files and definitions, Node's binary) into `target`."""
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [npm, "pack", f"{name}@{pin['version']}", "--json", "--loglevel=error"],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ImageBuildError(f"npm pack {name} failed:\n{result.stderr[-4000:]}")
        packed = json.loads(result.stdout)[0]
        if packed["integrity"] != pin["integrity"]:
            raise ImageBuildError(
                f"{name}@{pin['version']} has integrity {packed['integrity']}, "
                f"not the pinned {pin['integrity']}"
            )
        prefixes = tuple(f"package/{path}" for path in pin["paths"])
        with tarfile.open(Path(tmp) / packed["filename"]) as tar:
            members = [
                m
                for m in tar.getmembers()
                if (m.isfile() or m.isdir())
                and any(m.name == p or m.name.startswith(p + "/") for p in prefixes)
            ]
            for member in members:
                member.name = member.name.removeprefix("package/")
            tar.extractall(target, members=members, filter="data")


def _stage_code(node_modules: Path, staging: Path) -> None:
    """bin/ and seed/ as committed, plus the threads' bundles and the seed's node type index
    made from the catalog."""
    shutil.copytree(BIN_DIR, staging / "bin", ignore=shutil.ignore_patterns(BYTECODE))
    _build_native(staging / "bin")
    specs = [f"{name}={','.join(packages)}" for name, packages in BUNDLES.items()]
    bundles = staging / "bin" / "bundles"
    image_modules = f"{rootfs.APP_DIR}/node_modules"
    node = _host_program("node")
    result = subprocess.run(
        [node, str(BUNDLER), str(node_modules), str(bundles), image_modules, *specs],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ImageBuildError(f"bundling the threads' modules failed:\n{result.stderr[-4000:]}")
    shutil.copytree(SEED_DIR, staging / "seed")
    index = staging / "seed" / "node-types" / "index.txt"
    index.parent.mkdir()
    index.write_text(node_type_index(node_modules))


def _build_native(bin_dir: Path) -> None:
    """bin/reseed.node from bin/reseed.c: a Node-API module without headers (fresh-random.cjs
    reseeds OpenSSL with it in restored sandboxes); bin/as-job from bin/as-job.c (the job
    launcher starts each command through it)."""
    _compile(bin_dir / "reseed.c", bin_dir / "reseed.node", ["-shared", "-fPIC"])
    _compile(bin_dir / "as-job.c", bin_dir / "as-job", [])


def _compile(source: Path, target: Path, flags: list[str]) -> None:
    """`target` from the C `source` with this host's cc (the image's libc is this host's),
    the source then removed from the image."""
    result = subprocess.run(
        [_host_program("cc"), *flags, "-O2", str(source), "-o", str(target)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ImageBuildError(
            f"building bin/{target.name} failed (is gcc installed?):\n{result.stderr[-2000:]}"
        )
    source.unlink()


def node_type_index(node_modules: Path) -> str:
    """One line a node type: `type<TAB>display name<TAB>versions<TAB>description`, for the
    agent to grep in the workspace."""
    types: dict[str, tuple[str, set[float], str]] = {}
    for package, prefix in CATALOG_PACKAGES.items():
        nodes = json.loads(Path(catalog_file(node_modules, package, "nodes.json")).read_text())
        for description in nodes:
            versions = description.get("version", 1)
            name = f"{prefix}.{description['name']}"
            known = types.setdefault(
                name,
                (
                    description.get("displayName", ""),
                    set(),
                    " ".join(str(description.get("description", "")).split()),
                ),
            )
            known[1].update(versions if isinstance(versions, list) else [versions])
    return "".join(
        f"{name}\t{display}\t{','.join(f'{v:g}' for v in sorted(versions))}\t{text}\n"
        for name, (display, versions, text) in sorted(types.items())
    )


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode &= 0o755  # readable by the sandbox user, writable by nobody but root
    return info
