"""The instance's rules that do not depend on where it lives: data-table column names, the
filters a bulk write needs, parameter paths. Both implementations of the seam (the embedded
store and n8n) apply them, so a caller gets the same answer from either."""

from __future__ import annotations

import re
from typing import Any

from server.errors import InvalidArgumentError
from server.instance.types import SYSTEM_COLUMNS, RowFilter

__all__ = ["NAME", "check_column_name", "require_conditions", "set_path"]

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}")


def check_column_name(name: str, field: str = "name") -> None:
    if name in SYSTEM_COLUMNS:
        raise InvalidArgumentError(
            f"{field}: {name!r} is a reserved system column (id, createdAt, updatedAt are "
            "managed automatically); choose another name, e.g. prefixed with the table's subject"
        )
    if not NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"{field}: {name!r} is not a valid column name: letters, digits and underscores, "
            "starting with a letter, at most 63 characters"
        )


def require_conditions(row_filter: RowFilter, action: str) -> None:
    if not row_filter.filters:
        raise InvalidArgumentError(
            f"filter: give at least one condition; to {action} every row, say so with a "
            "condition that matches them all (e.g. id gte 0)"
        )


def set_path(tree: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`tree` with the value at a dotted path (list indexes as numbers) replaced."""
    parts = path.split(".")
    node: Any = tree
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return tree
