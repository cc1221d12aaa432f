"""Secrets recognised by their shape: the token formats vendors publish for their API keys,
personal access tokens and private keys. What the browser tools return is searched with
these before the model sees it (see `server/runtime/captured_secrets.py`).

A pattern names its kind (`slug`), which the redaction marker carries, so the model can tell
an OpenAI key from a GitHub token without seeing either."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PATTERNS", "SecretPattern", "find_secrets"]


@dataclass(frozen=True)
class SecretPattern:
    slug: str
    regex: re.Pattern[str]


def _p(slug: str, pattern: str) -> SecretPattern:
    return SecretPattern(slug, re.compile(pattern))


# Most specific first: a value is reported once, under the first kind that matched it.
PATTERNS: tuple[SecretPattern, ...] = (
    _p(
        "private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----)?",
    ),
    _p("anthropic_api_key", r"sk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_-]{80,}"),
    _p("openai_api_key", r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}"),
    _p("openai_api_key", r"\bsk-[A-Za-z0-9]{40,}"),
    _p("stripe_secret_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}"),
    _p("github_token", r"\bgh[pousr]_[A-Za-z0-9]{36,}"),
    _p("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    _p("gitlab_token", r"\bgl(?:pat|ptt|ft|dt|rt)-[A-Za-z0-9_-]{20,}"),
    _p("slack_token", r"\bxox[abeoprs]-(?:\d+-)+[A-Za-z0-9-]{10,}"),
    _p("slack_token", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{32,}"),
    _p("slack_webhook_url", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{30,}"),
    _p("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    _p("google_oauth_client_secret", r"\bGOCSPX-[A-Za-z0-9_-]{28,}"),
    _p("aws_access_key_id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    _p("huggingface_token", r"\bhf_[A-Za-z0-9]{34,}"),
    _p("groq_api_key", r"\bgsk_[A-Za-z0-9]{48,}"),
    _p("replicate_api_token", r"\br8_[A-Za-z0-9]{37,}"),
    _p("perplexity_api_key", r"\bpplx-[A-Za-z0-9]{40,}"),
    _p("npm_token", r"\bnpm_[A-Za-z0-9]{36,}"),
    _p("pypi_token", r"\bpypi-[A-Za-z0-9_-]{50,}"),
    _p("notion_token", r"\b(?:secret|ntn)_[A-Za-z0-9]{40,}"),
    _p("linear_api_key", r"\blin_api_[A-Za-z0-9]{40,}"),
    _p("sendgrid_api_key", r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}"),
    _p("mailchimp_api_key", r"\b[a-f0-9]{32}-us\d{1,2}\b"),
    _p("twilio_key", r"\b(?:SK|AC)[0-9a-f]{32}\b"),
    _p("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    _p("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}"),
    _p("telegram_bot_token", r"\b\d{6,12}:AA[A-Za-z0-9_-]{33}\b"),
    _p("figma_token", r"\bfigd_[A-Za-z0-9_-]{40,}"),
    _p("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
)


def find_secrets(text: str) -> list[tuple[str, str]]:
    """The (kind, value) of every secret-shaped value in `text`, each value once."""
    found: dict[str, str] = {}
    for pattern in PATTERNS:
        for match in pattern.regex.finditer(text):
            value = match.group(0)
            if value and not any(value in known for known in found):
                found[value] = pattern.slug
    return [(slug, value) for value, slug in found.items()]
