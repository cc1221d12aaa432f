"""What keeps secrets shown in the browser away from the model: every browser tool's result
is searched before it is returned (the thread's captured values, secret-shaped values, and for
the tools that read the page, the values the page itself marks as secret: password inputs,
inputs and cells labelled as a key, token, secret or password), each replaced by a marker
(`[REDACTED:openai_api_key:1]`) the model can hand to `browser_capture_secret`. Screenshots and
PDFs, which cannot be redacted, are refused while the page shows a secret."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from server.errors import FailedPreconditionError
from server.runtime.captured_secrets import CapturedSecrets
from server.tools.spec import ToolModel

__all__ = ["PROBE_TIMEOUT_S", "guard_visual", "page_secrets", "scrub"]

PROBE_TIMEOUT_S = 5.0
MAX_PROBED_TEXT = 200_000

# What names a secret (a label, an id) and what names something about it instead.
SENSITIVE_LABELS = (
    "secret|password|passcode|passphrase|token|api[-_ ]?key|access[-_ ]?key|private[-_ ]?key|"
    "credential|client[-_ ]?secret"
)
NOT_THE_VALUE = (
    r"\b(name|id|type|prefix|suffix|hint|created|updated|expir\w*|scopes?|label|description|"
    r"last used)\s*[:*]?\s*$"
)
TEXT_HOLDERS = "dd, td, code, pre, span, div, p, output, kbd, samp"

# Runs in the page: the values it marks as secret, and its visible text (for the shapes).
PROBE = (
    r"""() => {
  const SECRET = new RegExp('(' + WORDS + ')', 'i');
  const NOT_THE_VALUE = new RegExp(QUALIFIED, 'i');
  const names = (text) => !!text && SECRET.test(text) && !NOT_THE_VALUE.test(text.trim());
  const found = [];
  const labelOf = (el) => [
    el.getAttribute('aria-label'), el.getAttribute('name'), el.id,
    el.getAttribute('placeholder'), el.getAttribute('autocomplete'),
    el.getAttribute('data-testid'),
    ...(el.labels ? Array.from(el.labels).map((l) => l.textContent) : []),
  ].filter(Boolean).join(' ');
  for (const el of document.querySelectorAll('input, textarea')) {
    const value = (el.value || '').trim();
    if (value.length < 6) continue;
    if (el.type === 'password') found.push(['password', value]);
    else if (el.type !== 'hidden' && names(labelOf(el))) found.push(['secret_field', value]);
  }
  for (const el of document.querySelectorAll(HOLDERS)) {
    if (el.children.length) continue;
    const value = (el.textContent || '').trim();
    if (value.length < 12 || /\s/.test(value)) continue;
    const before = el.previousElementSibling;
    const partner = before && /^(DT|TH|TD|LABEL)$/.test(before.tagName) ? before.textContent : '';
    const own = [el.id, el.getAttribute('data-testid'), el.getAttribute('aria-label')]
      .filter(Boolean).join(' ').replace(/([a-z0-9])([A-Z])/g, '$1-$2');
    if (names(partner) || names(own)) found.push(['secret_field', value]);
  }
  const text = document.body ? document.body.innerText : '';
  return { found, text: text.slice(0, LIMIT) };
}""".replace("WORDS", json.dumps(SENSITIVE_LABELS))
    .replace("QUALIFIED", json.dumps(NOT_THE_VALUE))
    .replace("HOLDERS", json.dumps(TEXT_HOLDERS))
    .replace("LIMIT", str(MAX_PROBED_TEXT))
)


async def page_secrets(page: Any) -> tuple[list[tuple[str, str]], str] | None:
    """What the page marks as secret and its text; None when the page could not be asked
    (a dialog blocks it, it navigated away...)."""
    try:
        probed = await asyncio.wait_for(page.evaluate(PROBE), PROBE_TIMEOUT_S)
    except Exception:  # the caller decides what an unanswered check means
        return None
    found = [(str(kind), str(value)) for kind, value in probed.get("found") or []]
    return found, str(probed.get("text") or "")


async def scrub(
    secrets: CapturedSecrets, thread_id: str, result: ToolModel, page: Any | None
) -> ToolModel:
    """`result` with every secret replaced by its marker (`page`: also ask the page which of
    its values are secret)."""
    found: list[tuple[str, str]] = []
    if page is not None:
        probed = await page_secrets(page)
        if probed is not None:
            found = probed[0]
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    redacted, count = secrets.redact(thread_id, dumped, found)
    if not count:
        return result
    return type(result).model_validate(redacted)


async def guard_visual(secrets: CapturedSecrets, thread_id: str, page: Any) -> None:
    """Refuses a screenshot or PDF of a page that shows a secret (pixels cannot be redacted)."""
    probed = await page_secrets(page)
    if probed is None:
        raise FailedPreconditionError(
            "reason: sensitive_check_failed — the page could not be checked for secrets, so no "
            "picture of it is taken; use browser_snapshot (secrets are redacted there)"
        )
    found, text = probed
    if found or secrets.contains_secret(thread_id, text):
        raise FailedPreconditionError(
            "reason: sensitive_context — the page shows a secret, so no picture of it is taken; "
            "use browser_snapshot, which shows secrets as [REDACTED:…] markers, and "
            "browser_capture_secret to put one into a credential"
        )
