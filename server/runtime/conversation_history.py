"""A person's earlier conversations, as the assistant recalls them (n8n's conversation
history): their threads in the project the conversation is in, the one in progress left out,
found by text (titles, what they wrote, their answers to the assistant's questions) or listed
newest first, and a window of one thread's messages.

Messages are the person's (as typed) and the assistant's answers (its text), with the answers
the person gave to `ask-user` questions on the assistant's message of that run. Ids: a
person's message keeps the client's id (else its run's); an answer is `<run id>:answer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, exists, false, func, or_, select

from server.core.caller import Caller
from server.errors import NotFoundError
from server.runtime.thread_history import ThreadHistory
from server.store import Database
from server.store.models import ConfirmationRow, RunRow
from server.store.threads import THREADS

__all__ = [
    "MAX_SEARCH_LIMIT",
    "MAX_WINDOW_SIDE",
    "ConversationHistory",
    "Excerpt",
    "HistoryMessage",
    "MessagesWindow",
    "SearchHit",
]

MAX_SEARCH_LIMIT = 10
MAX_WINDOW_SIDE = 5
DEFAULT_SEARCH_LIMIT = 10
DEFAULT_LIST_LIMIT = 5
EXCERPT_CHARS = 200
EXCERPTS_PER_THREAD = 3
USER_TEXT_CHARS = 1500
ASSISTANT_TEXT_CHARS = 800
ASK_USER = "ask-user"
ANSWER_SUFFIX = ":answer"

_T = THREADS.c
_RUNS = RunRow.__table__.c
_CARDS = ConfirmationRow.__table__.c


@dataclass(frozen=True, kw_only=True)
class Excerpt:
    message_id: str
    text: str
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class SearchHit:
    thread_id: str
    title: str
    updated_at: datetime
    # title | messages | user-answers
    matched_in: list[str]
    excerpts: list[Excerpt]
    first_message_excerpt: str | None = None


@dataclass(frozen=True, kw_only=True)
class HistoryMessage:
    message_id: str
    role: str  # user | assistant
    created_at: datetime
    text: str
    # The person's answers to the assistant's questions in that run: (question, answer).
    user_answers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class MessagesWindow:
    thread_id: str
    title: str
    messages: list[HistoryMessage]
    has_more_before: bool
    has_more_after: bool


@dataclass(kw_only=True)
class ConversationHistory:
    db: Database

    async def search(
        self, caller: Caller, current_thread_id: str, query: str | None, limit: int | None
    ) -> list[SearchHit]:
        """The caller's other threads in their project matching `query` (case-insensitive, as
        one phrase), newest first; without a query, the most recent ones."""
        needle = (query or "").strip().lower()
        wanted = max(1, min(MAX_SEARCH_LIMIT, limit or 0)) if limit else None
        scoped = _scoped(caller, current_thread_id)
        if needle:
            pattern = f"%{_escaped(needle)}%"
            answered = await self._answer_matches(caller, current_thread_id, needle)
            said = exists().where(
                _RUNS.thread_id == _T.id, func.lower(_RUNS.message).like(pattern, escape="\\")
            )
            scoped = scoped.where(
                or_(
                    func.lower(func.coalesce(_T.title, "")).like(pattern, escape="\\"),
                    said,
                    _T.id.in_(sorted(answered)) if answered else false(),
                )
            )
        changed = func.coalesce(_T.updated_at, _T.created_at)
        count = wanted or (DEFAULT_SEARCH_LIMIT if needle else DEFAULT_LIST_LIMIT)
        async with self.db.engine.connect() as conn:
            rows = (
                await conn.execute(scoped.order_by(changed.desc(), _T.id.desc()).limit(count))
            ).all()
        return [await self._hit(row, needle) for row in rows]

    async def messages(
        self,
        caller: Caller,
        thread_id: str,
        *,
        around: str | None = None,
        before: int | None = None,
        after: int | None = None,
    ) -> MessagesWindow:
        """A window of one of the caller's threads (in their project): around a message, or
        its last `before` / first `after` messages (default: the last five)."""
        async with self.db.engine.connect() as conn:
            thread = (
                await conn.execute(
                    select(_T.id, _T.title).where(
                        _T.id == thread_id,
                        _T.owner == caller.user_id,
                        _T.project_id == caller.project_id,
                    )
                )
            ).first()
        if thread is None:
            raise NotFoundError("Conversation not found")
        everything = await self._messages(thread_id)
        if before is None and after is None:
            before, after = MAX_WINDOW_SIDE, MAX_WINDOW_SIDE if around is not None else 0
        before, after = _side(before), _side(after)
        if around is not None:
            at = next((i for i, m in enumerate(everything) if m.message_id == around), None)
            if at is None:
                raise NotFoundError("Message not found in this conversation")
            start, end = max(0, at - before), at + 1 + after
        elif before:  # the last messages
            start, end = max(0, len(everything) - before), len(everything)
        else:  # the first ones
            start, end = 0, after
        return MessagesWindow(
            thread_id=thread.id,
            title=thread.title or "",
            messages=everything[start:end],
            has_more_before=start > 0,
            has_more_after=end < len(everything),
        )

    async def _messages(self, thread_id: str) -> list[HistoryMessage]:
        """The thread's conversation: each person's message, and each answer with the
        person's answers to its questions (an answer with neither text nor answers is left
        out: a turn of tool calls only)."""
        answers = await _answers(self.db, [thread_id])
        found: list[HistoryMessage] = []
        said = await ThreadHistory(db=self.db).all(thread_id)
        answered = {m.run_id for m in said if m.role == "assistant"}
        for message in said:
            if message.role == "user":
                found.append(
                    HistoryMessage(
                        message_id=message.id,
                        role="user",
                        created_at=message.created_at,
                        text=_cut(message.text, USER_TEXT_CHARS),
                    )
                )
                if message.run_id in answered or not answers.get(message.run_id):
                    continue
                # The run asked and was answered, but wrote no text of its own.
                message = replace(message, role="assistant", text="")
            given = answers.get(message.run_id, [])
            if message.text.strip() or given:
                found.append(
                    HistoryMessage(
                        message_id=message.run_id + ANSWER_SUFFIX,
                        role="assistant",
                        created_at=message.created_at,
                        text=_cut(message.text, ASSISTANT_TEXT_CHARS),
                        user_answers=given,
                    )
                )
        return found

    async def _answer_matches(self, caller: Caller, current: str, needle: str) -> set[str]:
        """The caller's threads (in scope) whose answers to the assistant's questions hold
        `needle` (answers are JSON in the store: matched as the person reads them)."""
        async with self.db.engine.connect() as conn:
            ids = [row.id for row in await conn.execute(_scoped(caller, current))]
        answers = await _answers(self.db, ids)
        threads = await _threads_of_runs(self.db, list(answers))
        return {
            threads[run]
            for run, pairs in answers.items()
            if run in threads and any(needle in _qa(pair).lower() for pair in pairs)
        }

    async def _hit(self, row: Any, needle: str) -> SearchHit:
        messages = await self._messages(row.id)
        first = next((m for m in messages if m.role == "user" and m.text.strip()), None)
        matched: list[str] = []
        excerpts: list[Excerpt] = []
        if needle:
            if needle in (row.title or "").lower():
                matched.append("title")
            for message in reversed(messages):
                text = (
                    message.text
                    if message.role == "user"
                    else "\n".join(_qa(pair) for pair in message.user_answers)
                )
                where = text.lower().find(needle)
                if where < 0:
                    continue
                source = "messages" if message.role == "user" else "user-answers"
                if source not in matched:
                    matched.append(source)
                if len(excerpts) < EXCERPTS_PER_THREAD:
                    excerpts.append(
                        Excerpt(
                            message_id=message.message_id,
                            text=_centered(text, where, len(needle)),
                            created_at=message.created_at,
                        )
                    )
        changed = row.updated_at or row.created_at
        return SearchHit(
            thread_id=row.id,
            title=row.title or "",
            updated_at=changed if changed.tzinfo else changed.replace(tzinfo=UTC),
            matched_in=matched,
            excerpts=excerpts,
            first_message_excerpt=_cut(first.text, EXCERPT_CHARS) if first else None,
        )


def _scoped(caller: Caller, current_thread_id: str) -> Any:
    """The caller's threads in their project, but the current one, that have a message."""
    said = exists().where(_RUNS.thread_id == _T.id, _RUNS.message.is_not(None))
    return select(_T.id, _T.title, _T.updated_at, _T.created_at).where(
        and_(
            _T.owner == caller.user_id,
            _T.project_id == caller.project_id,
            _T.id != current_thread_id,
            said,
        )
    )


async def _answers(db: Database, thread_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
    """By run: the (question, answer) pairs of the answered ask-user cards of the threads."""
    if not thread_ids:
        return {}
    async with db.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(_CARDS.run_id, _CARDS.payload, _CARDS.answer)
                .where(
                    _CARDS.thread_id.in_(thread_ids),
                    _CARDS.tool_name == ASK_USER,
                    _CARDS.answer.is_not(None),
                )
                .order_by(_CARDS.created_at)
            )
        ).all()
    found: dict[str, list[tuple[str, str]]] = {}
    for run_id, payload, answer in rows:
        asked = {
            str(q.get("id")): str(q.get("question") or "")
            for q in (payload or {}).get("questions") or []
            if isinstance(q, dict)
        }
        for given in (answer or {}).get("answers") or []:
            if not isinstance(given, dict):
                continue
            question = asked.get(str(given.get("questionId")), str(given.get("questionId")))
            found.setdefault(run_id, []).append((question, _rendered(given)))
    return found


async def _threads_of_runs(db: Database, run_ids: list[str]) -> dict[str, str]:
    if not run_ids:
        return {}
    async with db.engine.connect() as conn:
        rows = await conn.execute(select(_RUNS.id, _RUNS.thread_id).where(_RUNS.id.in_(run_ids)))
        return {row.id: row.thread_id for row in rows}


def _rendered(given: dict[str, Any]) -> str:
    """An answer as the person gave it: the options chosen and their own words."""
    chosen = [str(o) for o in given.get("selectedOptions") or []]
    if given.get("customText"):
        chosen.append(str(given["customText"]))
    text = ", ".join(chosen)
    if given.get("skipped"):
        return f"{text} (skipped)" if text else "(skipped)"
    return text


def _qa(pair: tuple[str, str]) -> str:
    return f"Q: {pair[0]} → A: {pair[1]}"


def _side(value: int | None) -> int:
    return max(0, min(MAX_WINDOW_SIDE, value or 0))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…"


def _centered(text: str, at: int, length: int) -> str:
    """About EXCERPT_CHARS of `text` around a match, marked where cut."""
    if len(text) <= EXCERPT_CHARS:
        return text
    padding = max(0, (EXCERPT_CHARS - length) // 2)
    end = min(len(text), max(0, at - padding) + EXCERPT_CHARS)
    start = max(0, end - EXCERPT_CHARS)
    return f"{'…' if start > 0 else ''}{text[start:end]}{'…' if end < len(text) else ''}"


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
