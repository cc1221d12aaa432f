"""A person's own browser for the agent's browser tools: the CDP relay between Playwright and
the browser extension, browser sessions and their tokens, the public setup page, the
Playwright driver behind the tools, and the extension itself (`extension/`). Usable on its
own (`instance-ai browser-relay`); imports nothing from `server/`."""
