"""The agent: the loop, model providers and prompts."""

from __future__ import annotations

from server.agent.agent import Agent
from server.agent.anthropic_provider import AnthropicProvider
from server.agent.provider import ModelProvider
from server.settings import Settings

__all__ = ["Agent", "ModelProvider", "provider_from_settings"]


def provider_from_settings(settings: Settings) -> ModelProvider | None:
    """The configured provider, or None (no model: SendMessage says what to set)."""
    if not settings.model:
        return None
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    return AnthropicProvider(
        model=settings.model,
        api_key=key,
        base_url=settings.anthropic_base_url,
        timeout_s=settings.model_timeout_seconds,
        max_retries=settings.model_max_retries,
    )
