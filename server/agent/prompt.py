"""The orchestrator's system prompt, in sections: who it is, its skills (names and when to
load them: their text comes in with load_skill), how to use tools (and load more), how to
work (existing workflows, builds, plans, projects, approvals, credentials, untrusted content,
the user's computer), whose browser the browser tools drive, and the current time. Background
agents get a shorter one for their task (how to report, their rules), with the data-table
skill's text in it (they have no load_skill).

The text lives in Markdown files under `prompt_sections/`, one per section, read once at
import; this module only orders them and adds what is generated (the skill catalog, the time).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from server.tools.skills import SkillLibrary

__all__ = [
    "BROWSER_SANDBOX",
    "BROWSER_USER",
    "ROLE",
    "TOOL_USE",
    "background_prompt",
    "orchestrator_prompt",
]

SECTIONS_DIR = Path(__file__).with_name("prompt_sections")


def _section(name: str) -> str:
    return (SECTIONS_DIR / f"{name}.md").read_text(encoding="utf-8").strip()


ROLE = _section("role")
SKILLS = _section("skills")
TOOL_USE = _section("tools")
BROWSER_USER = _section("browser-user")
BROWSER_SANDBOX = _section("browser-sandbox")

# After the role, the skill catalog and the workspace, in this order: tools, then how to work.
_WORKING = tuple(
    _section(name)
    for name in (
        "workflow-lifecycle",
        "planning",
        "projects",
        "conversation-recall",
        "communication",
        "approvals",
        "capability-honesty",
        "setup-accuracy",
        "credentials",
        "safety",
        "computer-use",
    )
)
_ENVIRONMENT = _section("environment")
_LIMITS = _section("limits")
_REPLY_LANGUAGE = _section("reply-language")
_BACKGROUND = _section("background")
_DATETIME = _section("datetime")


def _now() -> str:
    """The current time, to the minute (it changes; the rest of the prompt does not)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ")
    return _DATETIME.replace("{now}", now)


def orchestrator_prompt(skills: SkillLibrary, browser: str = "user") -> str:
    """`browser` is which browser the browser tools drive (the `browser` setting)."""
    catalog = "\n".join(f"- {skill.name}: {skill.description}" for skill in skills.catalog())
    section = BROWSER_SANDBOX if browser == "sandbox" else BROWSER_USER
    return "\n\n".join(
        [
            ROLE,
            f"{SKILLS}\n{catalog}",
            _ENVIRONMENT,
            TOOL_USE,
            *_WORKING,
            section,
            _LIMITS,
            _REPLY_LANGUAGE,
            _now(),
        ]
    )


# What a background agent works with (its tools: `server/agent/distribution.py`); builds
# and verification stay with the orchestrator.
BACKGROUND_SKILLS = ("data-table-manager",)


def background_prompt(skills: SkillLibrary, role: str) -> str:
    guides = [skill.content for name in BACKGROUND_SKILLS if (skill := skills.get(name))]
    return "\n\n".join(
        [
            f"You are a background {role} agent working for the n8n workflow assistant. "
            "Do the task in the first message with the tools you have, then reply with a "
            "short report of what you did and found: that reply is your result. Messages "
            "that start with 'Correction:' come from the user while you work; follow them. "
            "You cannot delegate or plan. If you are stuck or need something only the user "
            "can decide, use ask-user rather than asking in your reply; never ask for secrets.",
            _BACKGROUND,
            _now(),
            *guides,
        ]
    )
