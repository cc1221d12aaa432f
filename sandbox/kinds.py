"""What a sandbox is for, which decides its layout. One engine and one owner hold both kinds;
each kind has its own manager, pool and janitor, and never touches the other's containers.

- **thread** (the default): one per conversation thread. The volume is the workspace
  (`/home/user/workspace`), seeded once from the image's `seed/`, and the pool's members are
  warmed with a build and a run so a thread's first build costs what later ones do.
- **service**: one per sandbox of the sandbox service API (n8n's `@n8n/sandbox-client`). The
  volume is the whole home (`/home/user`: n8n's assistant keeps its npm cache, global tools
  and workspace there), nothing is seeded (n8n writes its own workspace and marker), and
  commands find Node 24 and npm first on `PATH`, as on n8n's own service.

Thread containers carry no kind label (they predate kinds); the others carry their kind's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sandbox.engine import HOME_DIR
from sandbox.identity import LABEL_KIND
from sandbox.image.rootfs import WORKSPACE
from sandbox.image.tools import CA_BUNDLE

__all__ = [
    "SERVICE",
    "SERVICE_KEY_PREFIX",
    "SERVICE_PATH",
    "THREAD",
    "SandboxKind",
    "service_key",
    "service_sandbox_id",
]

# A service sandbox's key in its manager (where a thread sandbox has its thread id).
SERVICE_KEY_PREFIX = "sandbox-api/"

# n8n's service puts the user's own tool folders first (docs/API.md of n8n-sandbox-service);
# Node 24 is the image's one `node` (the base's Node 20 is off PATH).
SERVICE_PATH = (
    f"{HOME_DIR}/venv/bin:{HOME_DIR}/.npm-global/bin:/opt/node24/bin:"
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)


@dataclass(frozen=True, kw_only=True)
class SandboxKind:
    # The kind label's value ("" for thread sandboxes: no label).
    name: str
    # Where the sandbox's own volume is mounted.
    volume_mount: str = WORKSPACE
    # The directory commands and the container start in.
    working_dir: str = WORKSPACE
    # Added to the container's environment (the egress proxy's variables come on top).
    environment: Mapping[str, str] = field(default_factory=dict)
    # Whether the image's workspace seed is copied in on first use.
    seeded: bool = True
    # Whether pool members load the compiler and the engine before a thread claims them.
    warm_toolchain: bool = True

    def owns(self, labels: Mapping[str, str]) -> bool:
        """Whether a container with these labels is of this kind."""
        return labels.get(LABEL_KIND, "") == self.name


THREAD = SandboxKind(name="")
SERVICE = SandboxKind(
    name="service",
    volume_mount=HOME_DIR,
    working_dir=HOME_DIR,
    environment={
        "PATH": SERVICE_PATH,
        # `npm install -g` lands in the home, as on n8n's service (no root here either).
        "NPM_CONFIG_PREFIX": f"{HOME_DIR}/.npm-global",
        # Node reads only its own CA list; the image carries the host's bundle (an operator's
        # own CA, for a registry mirror that intercepts TLS, is in it), which curl and
        # Python read already.
        "NODE_EXTRA_CA_CERTS": str(CA_BUNDLE),
    },
    seeded=False,
    warm_toolchain=False,
)


def service_key(sandbox_id: str) -> str:
    """The key a service sandbox goes by in its manager and on its container's label."""
    return SERVICE_KEY_PREFIX + sandbox_id


def service_sandbox_id(key: str) -> str | None:
    """The service sandbox a manager key names (None: not a service sandbox's)."""
    return key.removeprefix(SERVICE_KEY_PREFIX) if key.startswith(SERVICE_KEY_PREFIX) else None
