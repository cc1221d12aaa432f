"""Skills: how-to guides the orchestrator loads when a request calls for one (`load_skill`).

Each skill is a directory in `skill_files/`: its `SKILL.md` starts with a front matter of
`name` (the directory's own name) and `description` (one line: when to load it), and its
linked files (`references/*.md`, as the reference's skills have them) are loaded one by one by
path. The system prompt lists names and descriptions only; a skill's text enters the
conversation when the model loads it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["LINKED_GROUPS", "MAIN_FILE", "SKILLS_DIR", "LinkedFile", "Skill", "SkillLibrary"]

SKILLS_DIR = Path(__file__).with_name("skill_files")
MAIN_FILE = "SKILL.md"
# The kinds of linked file a skill directory may hold, each in its own sub-directory.
LINKED_GROUPS = ("references", "templates", "scripts", "assets", "examples")


@dataclass(frozen=True, kw_only=True)
class LinkedFile:
    path: str  # relative to the skill's directory, e.g. "references/playbook.md"
    group: str
    content: str

    @property
    def bytes(self) -> int:
        return len(self.content.encode())

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Skill:
    name: str
    description: str
    content: str
    linked: tuple[LinkedFile, ...] = ()

    @property
    def hash(self) -> str:
        """Changes whenever the skill's text or any of its files does."""
        digest = hashlib.sha256(self.content.encode())
        for file in self.linked:
            digest.update(f"\0{file.path}\0{file.sha256}".encode())
        return digest.hexdigest()[:16]

    def file(self, path: str) -> LinkedFile | None:
        wanted = path.strip().removeprefix("./")
        return next((file for file in self.linked if file.path == wanted), None)


class SkillLibrary:
    """The skills of a directory, read once (they ship with the service)."""

    def __init__(self, directory: Path = SKILLS_DIR) -> None:
        skills = [_read(path) for path in sorted(directory.glob(f"*/{MAIN_FILE}"))]
        self._skills = {skill.name: skill for skill in skills}

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def catalog(self) -> list[Skill]:
        return list(self._skills.values())

    def names(self) -> list[str]:
        return list(self._skills)


def _read(path: Path) -> Skill:
    directory = path.parent
    text = path.read_text()
    _, separator, rest = text.partition("---\n")
    front, separator2, body = rest.partition("\n---\n")
    if not (text.startswith("---\n") and separator and separator2):
        raise ValueError(f"{path}: a skill starts with a --- front matter --- block")
    meta = yaml.safe_load(front) or {}
    name, description = meta.get("name"), meta.get("description")
    if name != directory.name or not isinstance(description, str) or not description.strip():
        raise ValueError(f"{path}: the front matter needs name: {directory.name} and a description")
    linked = tuple(
        LinkedFile(
            path=file.relative_to(directory).as_posix(), group=group, content=file.read_text()
        )
        for group in LINKED_GROUPS
        for file in sorted((directory / group).rglob("*"))
        if file.is_file()
    )
    return Skill(name=name, description=description.strip(), content=body.strip(), linked=linked)
