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


def from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(struct)
