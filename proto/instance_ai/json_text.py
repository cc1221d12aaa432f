"""JSON objects as the contract carries them: the UTF-8 text of the object in a `*_json` string
field (empty text means `{}`), for clients and the server alike. Text keeps JSON's types
exactly: 3 stays 3, 3.5 stays 3.5, and 2^53 + 1 is not rounded, which a
`google.protobuf.Struct` (every number a double) could not do. (Written by hand; the generated
modules are in `v1/`.)"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["from_json", "to_json"]


def to_json(value: Mapping[str, Any]) -> str:
    """The compact JSON text of an object; NaN and infinities are refused (JSON has none)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def from_json(text: str) -> dict[str, Any]:
    """The object a `*_json` field holds. Raises ValueError saying what is wrong with the text
    (not JSON, NaN or a number past a double's range, not an object, nested too deep) for the
    caller to report."""
    if not text:
        return {}
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError("nests arrays or objects too deeply") from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return "a number"


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"holds {text[:40]}, a number too large for JSON's doubles")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"holds {name}, which is not JSON")
