"""The node and credential type catalogs the image carries, and how the server gets them.

Each catalog package ships `dist/types/nodes.json` (one entry per node version group) and
`dist/types/credentials.json`. The image is the source of truth: the server copies the files out
of the image it runs (`extract_catalog`), so the catalog always matches what the sandbox
compiles and validates against, wherever the image was built.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from pathlib import Path

import docker
import docker.errors

from sandbox.errors import SandboxUnavailableError
from sandbox.image.rootfs import APP_DIR

__all__ = ["CATALOG_FILES", "CATALOG_PACKAGES", "catalog_file", "extract_catalog"]

# Package name → the prefix of its node type names.
CATALOG_PACKAGES = {
    "n8n-nodes-base": "n8n-nodes-base",
    "@n8n/n8n-nodes-langchain": "@n8n/n8n-nodes-langchain",
}
CATALOG_FILES = ("nodes.json", "credentials.json")


def catalog_file(node_modules: Path | str, package: str, name: str) -> str:
    return f"{node_modules}/{package}/dist/types/{name}"


def extract_catalog(client: docker.DockerClient, image: str, cache_dir: Path) -> Path:
    """The catalog of `image`, copied once into `cache_dir/<image hash>/<package>/` (blocking).
    Catalogs of other images are removed: only the running image's is needed."""
    target = cache_dir / image.split(":")[-1]
    if _complete(target):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=cache_dir))
    try:
        container = client.containers.create(image, command=["true"], network_mode="none")
        try:
            for package in CATALOG_PACKAGES:
                for name in CATALOG_FILES:
                    _copy_out(
                        container,
                        catalog_file(f"{APP_DIR}/node_modules", package, name),
                        staging / package / name,
                    )
        finally:
            container.remove(force=True)
        for other in cache_dir.iterdir():
            # Other images' catalogs go; this image's, or another process copying it, stay.
            if other not in (staging, target) and not other.name.startswith(".partial-"):
                shutil.rmtree(other, ignore_errors=True)
        try:
            staging.rename(target)  # all or nothing: a half-copied catalog is never read
        except OSError:
            if not _complete(target):  # not a process that got there first
                raise
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"reading the catalog from {image} failed: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _complete(target: Path) -> bool:
    return all((target / p / n).exists() for p in CATALOG_PACKAGES for n in CATALOG_FILES)


def _copy_out(container: object, path: str, destination: Path) -> None:
    stream, _stat = container.get_archive(path)  # type: ignore[attr-defined]
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.next()
        source = tar.extractfile(member) if member is not None else None
        if source is None:
            raise SandboxUnavailableError(f"{path} is missing from the sandbox image")
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(source.read())
