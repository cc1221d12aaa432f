"""JSON objects as the contract carries them (`google.protobuf.Struct`), for clients and the
server alike. (Written by hand; the generated modules are in `v1/`.)"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2

__all__ = ["from_struct", "to_struct"]


def to_struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


# A Struct number is a double, so 3 and 3.0 arrive alike: whole numbers are given back as
# whole numbers (360, not 360.0), as far as a double holds them exactly.
_EXACT = 2**53


def from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    found: dict[str, Any] = _whole(json_format.MessageToDict(struct))
    return found


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value
