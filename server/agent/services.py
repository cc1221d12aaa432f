"""What the agent works with, handed over by the composition root."""

from __future__ import annotations

from dataclasses import dataclass

from server.pipeline.work import WorkLoop
from server.runtime.attachments import Attachments
from server.runtime.background import BackgroundTasks
from server.runtime.conversation import Conversation
from server.runtime.events import EventLog
from server.runtime.hitl import Hitl
from server.runtime.plans import Plans
from server.runtime.replicas import Replicas
from server.runtime.threads import Threads
from server.settings import Settings
from server.tools.skills import SkillLibrary
from server.tools.spec import SandboxFor

__all__ = ["AgentServices"]


@dataclass(frozen=True, kw_only=True)
class AgentServices:
    """The thread's log, runs, history, cards, plans and background tasks, its sandbox (for
    large results) and its work items (what a planned build task's run built and proved).
    Tools come through the tool-call pipeline."""

    settings: Settings
    events: EventLog
    threads: Threads
    hitl: Hitl
    conversation: Conversation
    attachments: Attachments
    plans: Plans
    background: BackgroundTasks
    sandbox_for: SandboxFor
    skills: SkillLibrary
    replicas: Replicas
    loop: WorkLoop
