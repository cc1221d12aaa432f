"""Skills: how-to guides the orchestrator loads when a request calls for one (`load_skill`).
Each is a Markdown file in `skill_files/` with a front matter of `name` (the file's own name) and
`description` (one line: when to load it). The system prompt lists names and descriptions
only; a skill's text enters the conversation when the model loads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["SKILLS_DIR", "Skill", "SkillLibrary"]

SKILLS_DIR = Path(__file__).with_name("skill_files")


@dataclass(frozen=True, kw_only=True)
class Skill:
    name: str
    description: str
    content: str


class SkillLibrary:
    """The skills of a directory, read once (they ship with the service)."""

    def __init__(self, directory: Path = SKILLS_DIR) -> None:
        skills = [_read(path) for path in sorted(directory.glob("*.md"))]
        self._skills = {skill.name: skill for skill in skills}

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def catalog(self) -> list[Skill]:
        return list(self._skills.values())

    def names(self) -> list[str]:
        return list(self._skills)


def _read(path: Path) -> Skill:
    text = path.read_text()
    _, separator, rest = text.partition("---\n")
    front, separator2, body = rest.partition("\n---\n")
    if not (text.startswith("---\n") and separator and separator2):
        raise ValueError(f"{path}: a skill starts with a --- front matter --- block")
    meta = yaml.safe_load(front) or {}
    name, description = meta.get("name"), meta.get("description")
    if name != path.stem or not isinstance(description, str) or not description.strip():
        raise ValueError(f"{path}: the front matter needs name: {path.stem} and a description")
    return Skill(name=name, description=description.strip(), content=body.strip())
