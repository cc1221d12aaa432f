"""The headless browser layer: this host's Debian Chromium, for the sandboxed browser.

The sandbox image carries Chromium so that the browser tools can drive a browser inside the
thread's own sandbox (no network, no capabilities, uid 1000) when no person's browser is
wanted. Like the base layer, it is assembled from the host: Chromium's directory, the shared
libraries `ldd` says its binaries need, the libraries NSS loads with `dlopen` (which `ldd`
cannot see), and the fonts with their fontconfig configuration.

Chromium speaks CDP over a pipe (`--remote-debugging-pipe`: commands on fd 3, replies and
events on fd 4, each message ending in a NUL byte); `browser_command` maps those to the
process's stdin and stdout, so one attached `docker exec` carries the whole protocol.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import stat as stat_module
import subprocess
import tarfile
from pathlib import Path

from sandbox.errors import ImageBuildError
from sandbox.image import rootfs

__all__ = [
    "BROWSER_ENVIRONMENT",
    "CHROMIUM",
    "CHROMIUM_DIR",
    "DLOPENED",
    "FLAGS",
    "PACKAGES",
    "PROFILE_DIR",
    "TREES",
    "browser_command",
    "collect_files",
    "inputs_digest",
    "write_layer_tar",
]

CHROMIUM_DIR = Path("/usr/lib/chromium")
CHROMIUM = CHROMIUM_DIR / "chromium"
# Whole trees, symlinks kept: fontconfig's conf.d links into conf.avail.
TREES = (CHROMIUM_DIR, Path("/etc/fonts"), Path("/usr/share/fonts"), Path("/usr/share/fontconfig"))
# NSS opens its crypto modules with dlopen at run time.
# The Debian packages the layer comes from (their versions are part of its identity).
PACKAGES = ("chromium", "chromium-common")
DLOPENED = ("libsoftokn3.so", "libfreeblpriv3.so", "libnssckbi.so")
PROFILE_DIR = "/tmp/chromium-profile"  # noqa: S108 (the sandbox's own tmpfs)
# fontconfig's cache and Chromium's config must land on the tmpfs (the root is read-only).
BROWSER_ENVIRONMENT = {"HOME": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache"}  # noqa: S108
# Flags for a browser in a sandbox: the container is the isolation (Chromium's own sandbox
# needs user namespaces, which the hardened container denies), there is no GPU, /dev/shm is
# small, nothing may phone home (each such request would be put to the egress policy), and
# pages may open popups as under automation anywhere.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-component-extensions-with-background-pages",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--metrics-recording-only",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-popup-blocking",
    "--password-store=basic",
    "--disable-features=NetworkTimeServiceQuerying,CertificateTransparencyComponentUpdater,"
    "OptimizationHints,OptimizationHintsFetching,OptimizationGuideModelDownloading,"
    "OptimizationTargetPrediction,MediaRouter,DialMediaRouteProvider,Translate,"
    "AutofillServerCommunication",
    "--no-first-run",
    "--no-default-browser-check",
    "--remote-debugging-pipe",
    f"--user-data-dir={PROFILE_DIR}",
)


def browser_command(proxy: str | None) -> list[str]:
    """The argv that starts Chromium with CDP on stdin/stdout (stderr stays stderr).
    `proxy` (host:port) is where its pages reach the outside: every request but file://,
    loopback included (`<-loopback>`), since the sandbox's loopback is not the place an
    address like 127.0.0.1 means anywhere else."""
    proxied = [f"--proxy-server=http://{proxy}", "--proxy-bypass-list=<-loopback>"]
    flags = [*FLAGS, *(proxied if proxy else [])]
    chromium = " ".join(shlex.quote(part) for part in (str(CHROMIUM), *flags, "about:blank"))
    # fd 3 ← stdin, fd 4 → stdout; Chromium's own stdout goes to stderr, kept for diagnostics.
    return ["sh", "-c", f"exec {chromium} 3<&0 4>&1 1>&2"]


def collect_files() -> dict[str, Path]:
    """Archive path → host file for the shared libraries the browser needs beyond `TREES`."""
    if not CHROMIUM.exists():
        raise ImageBuildError(
            f"{CHROMIUM} is missing: the sandbox image carries this host's Chromium; install "
            "Debian's chromium (scripts/setup-system does)"
        )
    objects = [p for p in CHROMIUM_DIR.iterdir() if p.is_file() and _is_elf(p)]
    library_dir = Path(os.path.realpath("/usr/lib/x86_64-linux-gnu"))
    objects += [library_dir / name for name in DLOPENED if (library_dir / name).exists()]
    files: dict[str, Path] = {}
    for path in objects:
        if not str(path).startswith(str(CHROMIUM_DIR)):
            files[rootfs.in_merged_usr(str(path))] = path.resolve()
        for library in rootfs.libraries(path):
            files[rootfs.in_merged_usr(library)] = Path(library).resolve()
    for check in library_dir.glob("lib*3.chk"):  # NSS verifies its modules against these
        files[rootfs.in_merged_usr(str(check))] = check
    return files


def inputs_digest(files: dict[str, Path]) -> str:
    """The layer's identity: the Chromium package's version, and the name, size and
    modification time of every file and symlink the layer carries (not contents: hashing
    350 MB on every service start would cost seconds, and an upgrade changes all three).
    Directories do not count: running Chromium creates empty ones in its own tree (an
    `extensions` folder on first start), and the identity must not move with that."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(_package_versions().encode())
    entries = [(name, path) for name, path in files.items()]
    for tree in TREES:
        entries += [(str(p), p) for p in tree.rglob("*")]
    for name, path in sorted(entries):
        stat = path.lstat()
        if stat_module.S_ISDIR(stat.st_mode):
            continue
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _package_versions() -> str:
    """`chromium <version>` lines from dpkg, or nothing where dpkg is not the package manager."""
    dpkg_query = shutil.which("dpkg-query")
    if dpkg_query is None:
        return ""
    result = subprocess.run(
        [dpkg_query, "-W", "-f", "${Package} ${Version}\\n", *PACKAGES],
        capture_output=True,
        text=True,
    )
    return result.stdout


def write_layer_tar(files: dict[str, Path], out: Path) -> None:
    """The layer's files as a tar to unpack at `/`, every file owned by root."""

    def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(out, "w") as tar:
        for tree in TREES:
            if tree.exists():
                tar.add(tree, arcname=rootfs.in_merged_usr(str(tree)), filter=root_owned)
        for archive_path, source in sorted(files.items()):
            tar.add(source, arcname=archive_path, recursive=False, filter=root_owned)


def _is_elf(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(4) == b"\x7fELF"
