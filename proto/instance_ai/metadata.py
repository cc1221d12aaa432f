"""gRPC metadata keys of the contract (beyond the .proto files). Written by hand."""

from __future__ import annotations

__all__ = ["ACTING_KEY_KEY", "PROJECTS_KEY", "PROJECT_KEY", "RESUME_AFTER_KEY", "USER_KEY"]

# Trailing metadata on an ABORTED (lagged) event stream: the event id to resume after.
RESUME_AFTER_KEY = "x-resume-after"

# Who is calling (the same names as HTTP headers): the user id (default: local), the project
# new things go into (default: personal), and the comma-separated projects the user may see
# (default: that project).
USER_KEY = "x-instance-ai-user"
PROJECT_KEY = "x-instance-ai-project"
PROJECTS_KEY = "x-instance-ai-projects"
# The calling user's own n8n API key (sent by the n8n backend or the bridge): every n8n request
# made for the call uses it, so the assistant acts with exactly that user's rights in n8n.
ACTING_KEY_KEY = "x-n8n-api-key"
