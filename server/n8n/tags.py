"""Tags kept in n8n."""

from __future__ import annotations

from server.errors import InvalidArgumentError
from server.instance.types import Tag
from server.n8n.client import N8nClient

__all__ = ["N8nTags"]


class N8nTags:
    def __init__(self, client: N8nClient) -> None:
        self.client = client

    async def all(self) -> list[Tag]:
        tags = await self.client.pages("/tags")
        workflows = await self.client.pages("/workflows", excludePinnedData=True)
        usage: dict[str, int] = {}
        for workflow in workflows:
            for tag in workflow.get("tags") or []:
                usage[str(tag["id"])] = usage.get(str(tag["id"]), 0) + 1
        found = [
            Tag(id=str(t["id"]), name=str(t["name"]), usage_count=usage.get(str(t["id"]), 0))
            for t in tags
        ]
        return sorted(found, key=lambda t: t.name)

    async def set_workflow_tags(self, workflow_id: str, names: list[str]) -> list[str]:
        """Replace the workflow's tags with `names`, creating tags n8n does not have yet."""
        wanted = list(dict.fromkeys(n.strip() for n in names))
        if any(not n or len(n) > 64 for n in wanted):
            raise InvalidArgumentError("tags: each tag needs 1-64 characters")
        await self.client.get(f"/workflows/{workflow_id}")  # NOT_FOUND before any tag is made
        known = {str(t["name"]): str(t["id"]) for t in await self.client.pages("/tags")}
        for name in wanted:
            if name not in known:
                known[name] = str((await self.client.post("/tags", {"name": name}))["id"])
        await self.client.put(
            f"/workflows/{workflow_id}/tags", [{"id": known[name]} for name in wanted]
        )
        return wanted
