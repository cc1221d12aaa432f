"""What the agent does with a message's attachments: names them to the model in the message
itself (a manifest: index, name, type, size, where in the workspace) and copies them into the
thread's workspace under attachments/, so commands and the workspace tools see them too."""

from __future__ import annotations

import structlog

from server.runtime.attachments import StoredAttachment
from server.tools.spec import SandboxFor

__all__ = ["copy_into_workspace", "manifest"]

log = structlog.get_logger(__name__)


def _size(size: int) -> str:
    return f"{size / 1024:.1f} KB" if size < 1024 * 1024 else f"{size / (1024 * 1024):.1f} MB"


def manifest(stored: list[StoredAttachment], *, in_workspace: bool) -> str:
    """The block appended to the user's message ("" without attachments)."""
    if not stored:
        return ""
    lines = []
    for a in stored:
        where = f"; workspace: {a.workspace_path}" if in_workspace else ""
        how = (
            f"read with parse-file (attachmentIndex {a.position})"
            if a.format is not None
            else "not a format parse-file reads"
        )
        lines.append(f"{a.position}: {a.name} ({a.mime_type}, {_size(a.size)}) — {how}{where}")
    return "\n\n<attachments>\n" + "\n".join(lines) + "\n</attachments>"


async def copy_into_workspace(
    sandbox_for: SandboxFor, thread_id: str, stored: list[StoredAttachment]
) -> None:
    """Best effort: the files stay readable through parse-file if the copy fails."""
    if not stored:
        return
    try:
        sandbox = await sandbox_for(thread_id)
        for attachment in stored:
            await sandbox.write_file(thread_id, attachment.workspace_path, attachment.data)
    except Exception as exc:
        log.warning(
            "attachments not copied into the workspace", thread_id=thread_id, error=str(exc)
        )
