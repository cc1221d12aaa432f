"""Browser sessions and their tokens.

A session is found by a key the caller gives (a user id, an agent and resource id): the key
is hashed before it is used anywhere (a path, a log line, a map key), since it may come from
someone who wants it to be `../../etc`. Three tokens guard a session:

- the **setup token** (`bus_…`, 15 min): the capability behind the public setup page, which a
  person with no account may open; reused while valid, so a link already sent stays good;
- the **relay token** (`bu_…`): what the extension presents; minted when the page asks for a
  connect link, to be used within 5 min, and valid after its first use so the extension can
  reconnect;
- the **CDP token** (`cdp_…`): for the automation client, in a header, on loopback only.

Comparisons are constant-time; an unknown, expired or wrong token is answered exactly like a
missing one.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from browser_relay.relay import RelaySession

__all__ = [
    "RELAY_TOKEN_SECONDS",
    "SETUP_TOKEN_SECONDS",
    "BrowserSession",
    "BrowserSessions",
    "Expiring",
    "sandbox_key",
    "session_id_for",
    "user_key",
]

SETUP_TOKEN_SECONDS = 15 * 60
RELAY_TOKEN_SECONDS = 5 * 60


def user_key(user_id: str) -> str:
    """The key of a user's own browser session."""
    return f"user:{user_id}"


def sandbox_key(thread_id: str) -> str:
    """The key of the headless browser in a thread's sandbox."""
    return f"sandbox:{thread_id}"


def session_id_for(key: str) -> str:
    """The session id for a caller-influenced key: a hash, safe in any path or file name."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Expiring:
    value: str
    expires_at: float


@dataclass(eq=False)
class BrowserSession:
    id: str
    relay: RelaySession
    cdp_token: str
    setup: Expiring | None = None
    relay_token: Expiring | None = None
    relay_token_used: bool = False
    connected_at: float | None = None


class BrowserSessions:
    def __init__(
        self,
        *,
        grace_seconds: float = 15.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._grace = grace_seconds
        self._clock = clock
        self._sessions: dict[str, BrowserSession] = {}

    def session(self, key: str) -> BrowserSession:
        session_id = session_id_for(key)
        found = self._sessions.get(session_id)
        if found is None:
            found = BrowserSession(
                id=session_id,
                relay=RelaySession(
                    session_id,
                    grace_seconds=self._grace,
                    on_change=lambda: self._changed(session_id),
                ),
                cdp_token="cdp_" + secrets.token_urlsafe(24),
            )
            self._sessions[session_id] = found
        return found

    def forget(self, session_id: str) -> None:
        """Drop a session that will not be used again (its thread is gone)."""
        self._sessions.pop(session_id, None)

    def get(self, session_id: str) -> BrowserSession | None:
        return self._sessions.get(session_id)

    def setup_token(self, session: BrowserSession) -> Expiring:
        """The session's setup token: the same one while it is valid."""
        now = self._clock()
        if session.setup is None or session.setup.expires_at <= now:
            session.setup = Expiring("bus_" + secrets.token_urlsafe(24), now + SETUP_TOKEN_SECONDS)
        return session.setup

    def by_setup_token(self, token: str) -> BrowserSession | None:
        now = self._clock()
        for session in self._sessions.values():
            setup = session.setup
            if setup and setup.expires_at > now and secrets.compare_digest(setup.value, token):
                return session
        return None

    def mint_relay_token(self, session: BrowserSession) -> Expiring:
        """A fresh token for the extension (the previous one stops working)."""
        session.relay_token = Expiring(
            "bu_" + secrets.token_urlsafe(24), self._clock() + RELAY_TOKEN_SECONDS
        )
        session.relay_token_used = False
        return session.relay_token

    def extension_may_connect(self, session: BrowserSession, token: str) -> bool:
        issued = session.relay_token
        if issued is None or not secrets.compare_digest(issued.value, token):
            return False
        if not session.relay_token_used and issued.expires_at <= self._clock():
            return False
        session.relay_token_used = True
        return True

    def client_may_connect(self, session: BrowserSession, token: str) -> bool:
        return secrets.compare_digest(session.cdp_token, token)

    def _changed(self, session_id: str) -> None:
        session = self._sessions[session_id]
        if session.relay.state == "connected" and session.connected_at is None:
            session.connected_at = self._clock()
        elif session.relay.state == "waiting":
            session.connected_at = None

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.relay.close()
