"""The user's instance as the tools and the pipeline see it: protocols (`protocols.py`) over
values (`types.py`), with the embedded SQL store (`server/domain/`) as one implementation."""

from __future__ import annotations

from dataclasses import dataclass

from server.instance.protocols import (
    FOLDERS_FEATURE,
    Activity,
    CredentialChecks,
    Credentials,
    CredentialSecrets,
    CredentialTypes,
    DataTables,
    Executions,
    Features,
    Folders,
    InstanceUnavailableError,
    Projects,
    Tags,
    Workflows,
)

__all__ = [
    "FOLDERS_FEATURE",
    "Activity",
    "CredentialChecks",
    "CredentialSecrets",
    "CredentialTypes",
    "Credentials",
    "DataTables",
    "Executions",
    "Features",
    "Folders",
    "Instance",
    "InstanceUnavailableError",
    "Projects",
    "Tags",
    "Workflows",
]


@dataclass(frozen=True, kw_only=True)
class Instance:
    """One instance's parts, as the composition root hands them out."""

    workflows: Workflows
    executions: Executions
    credentials: Credentials
    # None where runs do not happen in this service's sandboxes (an n8n instance runs them).
    secrets: CredentialSecrets | None
    # Where secrets stay in the instance, its own credential test (else: None).
    checks: CredentialChecks | None = None
    # Where the instance knows credential types of its own (else: the catalog's are all).
    credential_types: CredentialTypes | None = None
    data_tables: DataTables
    # None: the instance keeps no folders the service can reach (n8n's are licensed, and its
    # public API names none without a licence): the folder tools are not offered.
    folders: Folders | None
    tags: Tags
    projects: Projects
    features: Features
    # The log of the changes made to its workflows and credentials (None: not one the service
    # can read; n8n keeps its own, out of its public API): instance-activity is not offered.
    activity: Activity | None = None
