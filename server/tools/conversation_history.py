"""The conversation-history tool (n8n's): the user's past conversations in this project, the
current one left out. `search` finds them by text or lists the most recent; `get-messages`
reads a window of one. Read-only; what cannot be found comes back as `error`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from server.errors import NotFoundError
from server.runtime.conversation_history import (
    MAX_SEARCH_LIMIT,
    MAX_WINDOW_SIDE,
    ConversationHistory,
    HistoryMessage,
    SearchHit,
)
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "ConversationHistoryTools"]

GROUP = "conversation-history"


@dataclass(frozen=True, kw_only=True)
class ConversationHistoryTools:
    history: ConversationHistory


class SearchAction(ToolModel):
    """Find past conversations by text, or list the most recent ones."""

    action: Literal["search"] = Field(
        description="Find past conversations by text, or list the most recent ones"
    )
    query: str | None = Field(
        None,
        min_length=2,
        max_length=200,
        description="Case-insensitive text matched against conversation titles, the user's "
        "messages and their answers to the assistant's questions, as one exact phrase: "
        "prefer few, short, distinctive words, and separate searches for separate things. "
        "Omit it to list the most recent conversations",
    )
    limit: int | None = Field(
        None,
        ge=1,
        le=MAX_SEARCH_LIMIT,
        description=f"Max conversations (default 10 searching, 5 listing; max {MAX_SEARCH_LIMIT})",
    )


class GetMessagesAction(ToolModel):
    """Read a window of messages of one past conversation."""

    action: Literal["get-messages"] = Field(description="Read messages of one past conversation")
    thread_id: str = Field(alias="threadId", min_length=1, description="From a search result")
    around_message_id: str | None = Field(
        None, alias="aroundMessageId", description="Center on this message (from an excerpt)"
    )
    before: int | None = Field(
        None,
        ge=1,
        le=MAX_WINDOW_SIDE,
        description="Messages before the anchor; without aroundMessageId, the conversation's "
        f"last N (max {MAX_WINDOW_SIDE})",
    )
    after: int | None = Field(
        None,
        ge=1,
        le=MAX_WINDOW_SIDE,
        description="Messages after the anchor; without aroundMessageId, the conversation's "
        f"first N (max {MAX_WINDOW_SIDE})",
    )

    @model_validator(mode="after")
    def _one_side_without_anchor(self) -> GetMessagesAction:
        if self.around_message_id is None and self.before is not None and self.after is not None:
            raise ValueError("before and after can only be combined with aroundMessageId")
        return self


HistoryInput = Annotated[SearchAction | GetMessagesAction, Field(discriminator="action")]


class ExcerptModel(ToolModel):
    message_id: str = Field(alias="messageId")
    text: str
    created_at: datetime = Field(alias="createdAt")


class HitModel(ToolModel):
    thread_id: str = Field(alias="threadId")
    title: str
    updated_at: datetime = Field(alias="updatedAt")
    matched_in: list[Literal["title", "messages", "user-answers"]] = Field(alias="matchedIn")
    first_message_excerpt: str | None = Field(None, alias="firstMessageExcerpt")
    excerpts: list[ExcerptModel]


class UserAnswer(ToolModel):
    question: str
    answer: str


class MessageModel(ToolModel):
    message_id: str = Field(alias="messageId")
    role: Literal["user", "assistant"]
    created_at: datetime = Field(alias="createdAt")
    text: str
    user_answers: list[UserAnswer] | None = Field(None, alias="userAnswers")


class HistoryOutput(ToolModel):
    """search: `hits`; get-messages: the thread, its window and whether there is more."""

    hits: list[HitModel] | None = None
    thread_id: str | None = Field(None, alias="threadId")
    title: str | None = None
    messages: list[MessageModel] | None = None
    has_more_before: bool | None = Field(None, alias="hasMoreBefore")
    has_more_after: bool | None = Field(None, alias="hasMoreAfter")
    error: str | None = None


def _hit(hit: SearchHit) -> HitModel:
    return HitModel.model_validate(
        {
            "threadId": hit.thread_id,
            "title": hit.title,
            "updatedAt": hit.updated_at,
            "matchedIn": hit.matched_in,
            "firstMessageExcerpt": hit.first_message_excerpt,
            "excerpts": [
                ExcerptModel(message_id=e.message_id, text=e.text, created_at=e.created_at)
                for e in hit.excerpts
            ],
        }
    )


def _message(message: HistoryMessage) -> MessageModel:
    return MessageModel.model_validate(
        {
            "messageId": message.message_id,
            "role": message.role,
            "createdAt": message.created_at,
            "text": message.text,
            "userAnswers": [{"question": q, "answer": a} for q, a in message.user_answers] or None,
        }
    )


async def conversation_history(
    ctx: ToolContext[ConversationHistoryTools], args: SearchAction | GetMessagesAction
) -> HistoryOutput:
    history = ctx.services.history
    if isinstance(args, SearchAction):
        hits = await history.search(ctx.caller, ctx.thread_id, args.query, args.limit)
        return HistoryOutput(hits=[_hit(h) for h in hits])
    try:
        window = await history.messages(
            ctx.caller,
            args.thread_id,
            around=args.around_message_id,
            before=args.before,
            after=args.after,
        )
    except NotFoundError as exc:
        return HistoryOutput(
            thread_id=args.thread_id,
            title="",
            messages=[],
            has_more_before=False,
            has_more_after=False,
            error=str(exc),
        )
    return HistoryOutput(
        thread_id=window.thread_id,
        title=window.title,
        messages=[_message(m) for m in window.messages],
        has_more_before=window.has_more_before,
        has_more_after=window.has_more_after,
    )


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="conversation-history",
        description="Recall the user's past conversations in this project (this one left "
        "out): stated preferences, earlier requirements, prior work. search finds "
        "conversations by text, or lists the most recent without a query; get-messages then "
        "reads a window of messages of one of them. Read-only.",
        group=GROUP,
        services=ConversationHistoryTools,
        input_model=HistoryInput,
        output_model=HistoryOutput,
        handler=conversation_history,
    ),
]
