"""The browser behind the agent's browser tools: the CDP relay between Playwright and the
browser extension (a person's own browser) or a headless Chromium in a sandbox (`headless.py`),
browser sessions and their tokens, the public setup page, the Playwright driver behind the
tools, and the extension itself (`extension/`). Usable on its own (`instance-ai
browser-relay`); imports nothing from `server/`."""

__all__: list[str] = []
