"""Provider-safe tool input schemas.

Model providers accept a tool's `input_schema` only when its root is `{"type": "object"}` with
no `anyOf`/`oneOf`/`allOf` beside it, and one bad tool fails the whole request. pydantic emits
exactly those shapes for discriminated unions (`oneOf` + `discriminator`, no `type`), refs into
`$defs`, and `anyOf [X, null]` for optionals. `sanitize` rewrites a schema into the accepted
subset:

* local `$ref`s are inlined (a recursive ref becomes an open object), `$defs` removed;
* `allOf` parts are merged, `oneOf` becomes `anyOf`, `discriminator` is dropped;
* `anyOf [X, null]` collapses to X with `null` added to its type;
* `const` becomes a one-value `enum`; validation keywords providers refuse move into the
  description; titles and other annotations go;
* a root union is flattened into one object: every branch's properties, `required` = what
  every branch requires, the discriminator one enum, and each mode-specific field says which
  mode it belongs to.

The result accepts every input the original accepts (a superset), so the registry validates
every call with the real model. A schema with no object form raises `Inexpressible`; the
registry then drops the tool with a warning instead of sending it.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

__all__ = ["Inexpressible", "provider_rule_violations", "sanitize"]

KEEP = {"type", "properties", "required", "enum", "items", "anyOf", "additionalProperties"}
ANNOTATIONS = {"description", "default", "format"}
FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6"}
FORMATS |= {"uuid"}
# Validation keywords kept as words in the description, where every provider accepts them.
DESCRIBED = {
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "pattern": "matches {}",
    "minimum": "≥ {}",
    "maximum": "≤ {}",
    "exclusiveMinimum": "> {}",
    "exclusiveMaximum": "< {}",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "multipleOf": "a multiple of {}",
}
MAX_DEPTH = 32
MAX_NODES = 10_000
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class Inexpressible(ValueError):
    """The schema has no form a provider accepts; the tool must not be sent."""


def sanitize(schema: dict[str, Any]) -> dict[str, Any]:
    walker = _Walker(copy.deepcopy(schema))
    out = walker.walk(walker.root, depth=0, refs=("#",))
    return _object_root(out)


def provider_rule_violations(name: str, schema: dict[str, Any]) -> list[str]:
    """What the Messages API would refuse in this tool definition (used by tests and as a
    last guard before sending)."""
    problems = []
    if not _NAME.fullmatch(name):
        problems.append(f"name {name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$")
    if schema.get("type") != "object":
        problems.append("input_schema.type must be 'object'")
    problems += [
        f"input_schema has {k} at the root" for k in ("anyOf", "oneOf", "allOf") if k in schema
    ]
    return problems


class _Walker:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.nodes = 0

    def walk(self, node: Any, *, depth: int, refs: tuple[str, ...]) -> dict[str, Any]:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            raise Inexpressible(
                f"schema nests deeper than {MAX_DEPTH} or exceeds {MAX_NODES} nodes"
            )
        if node is True or node == {}:
            return {}
        if not isinstance(node, dict):
            raise Inexpressible(f"a schema node is {node!r}, not an object")
        node = {str(k): v for k, v in node.items() if k not in ("$defs", "definitions")}
        if "$ref" in node:
            node = self._inline(node, refs)
            if node.pop("_recursive", False):
                return dict(node)
            refs = (*refs, node.pop("_ref"))
        if "allOf" in node:
            parts = [self.walk(p, depth=depth + 1, refs=refs) for p in node.pop("allOf")]
            node = _merge_all_of(node, parts)
        if "oneOf" in node:
            if "anyOf" in node:
                raise Inexpressible("a node has both oneOf and anyOf")
            node["anyOf"] = node.pop("oneOf")
        if "const" in node:
            node["enum"] = [node.pop("const")]
        out = self._keywords(node, depth, refs)
        return _collapse_any_of(out) if "anyOf" in out else out

    def _keywords(self, node: dict[str, Any], depth: int, refs: tuple[str, ...]) -> dict[str, Any]:
        """The kept keywords, subschemas walked; constraints turned into words."""
        out: dict[str, Any] = {}
        constraints: list[str] = []
        for key, value in node.items():
            if key == "properties":
                out[key] = {n: self.walk(s, depth=depth + 1, refs=refs) for n, s in value.items()}
            elif key in ("items", "prefixItems"):
                out["items"] = self._items(value, depth, refs)
            elif key == "anyOf":
                out[key] = [self.walk(s, depth=depth + 1, refs=refs) for s in value]
            elif key == "additionalProperties" and isinstance(value, dict):
                out[key] = self.walk(value, depth=depth + 1, refs=refs)
            elif key == "format":
                if value in FORMATS:
                    out[key] = value
            elif key in KEEP or key in ANNOTATIONS:
                out[key] = value
            elif key in DESCRIBED and not isinstance(value, bool):
                constraints.append(DESCRIBED[key].format(value))
        if "enum" in out and "type" not in out:
            out["type"] = _type_of(out["enum"])
        if constraints:
            note = "; ".join(constraints)
            described = out.get("description")
            out["description"] = f"{described} ({note})" if described else note.capitalize()
        return out

    def _items(self, value: Any, depth: int, refs: tuple[str, ...]) -> dict[str, Any]:
        if isinstance(value, list):  # a tuple: any position's shape
            return {"anyOf": [self.walk(s, depth=depth + 1, refs=refs) for s in value]}
        return self.walk(value, depth=depth + 1, refs=refs)

    def _inline(self, node: dict[str, Any], refs: tuple[str, ...]) -> dict[str, Any]:
        ref = node.pop("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise Inexpressible(f"external $ref {ref!r}")
        if ref in refs:
            name = ref.rsplit("/", 1)[-1] or "root"
            return {
                "type": "object",
                "description": node.get("description")
                or f"(recursive {name}: same shape as above)",
                "_recursive": True,
            }
        target: Any = self.root
        for part in ref.lstrip("#").strip("/").split("/") if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise Inexpressible(f"$ref {ref!r} does not resolve")
            target = target[part]
        if not isinstance(target, dict):
            raise Inexpressible(f"$ref {ref!r} is not a schema")
        merged = {k: v for k, v in target.items() if k not in ("$defs", "definitions")}
        merged.update(node)  # siblings of the ref (description, default) win
        merged["_ref"] = ref
        return merged


def _merge_all_of(node: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every part must hold: properties and `required` united, types must agree."""
    merged: dict[str, Any] = dict(node)
    for part in parts:
        for key, value in part.items():
            if key == "properties":
                merged["properties"] = value | merged.get("properties", {})
            elif key == "required":
                merged["required"] = sorted(set(merged.get("required", [])) | set(value))
            elif key == "type" and "type" in merged and merged["type"] != value:
                raise Inexpressible(f"allOf parts disagree on type: {merged['type']} vs {value}")
            else:
                merged.setdefault(key, value)
    return merged


def _collapse_any_of(node: dict[str, Any]) -> dict[str, Any]:
    branches = _dedupe(node.pop("anyOf"))
    if not branches:
        raise Inexpressible("an anyOf with no branches matches nothing")
    non_null = [b for b in branches if b != {"type": "null"}]
    nullable = len(non_null) < len(branches)
    if len(non_null) == 1:
        merged = {**non_null[0], **{k: v for k, v in node.items() if k != "type"}}
        if nullable:
            _allow_null(merged)
        return merged
    node["anyOf"] = branches
    return node


def _allow_null(schema: dict[str, Any]) -> None:
    kind = schema.get("type")
    if isinstance(kind, str) and kind != "null":
        schema["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        schema["type"] = [*kind, "null"]
    if "enum" in schema and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    if schema.get("default", ...) is None:
        schema.pop("default")  # the provider-visible form is "leave it out"


def _object_root(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, list) and "object" in kind:
        schema["type"] = "object"
        kind = "object"
    if "anyOf" in schema:
        return _flatten_union(schema)
    if schema == {} or (kind is None and set(schema) <= ANNOTATIONS):
        return {"type": "object", "properties": {}, **schema}
    if kind != "object":
        raise Inexpressible(f"the root is {kind or 'untyped'}, not an object")
    schema.setdefault("properties", {})
    return schema


def _flatten_union(root: dict[str, Any]) -> dict[str, Any]:
    """One object standing for every branch of a root union."""
    branches = _object_branches(root)
    if not branches:
        raise Inexpressible("the root union has no object branch")
    discriminator = _discriminator(branches)
    labels = [_label(b, discriminator) for b in branches]
    properties: dict[str, Any] = {}
    owners: dict[str, list[int]] = {}
    for index, branch in enumerate(branches):
        for name, sub in branch.get("properties", {}).items():
            owners.setdefault(name, []).append(index)
            properties[name] = _merge_property(properties.get(name), sub, labels[index])
    for name, indices in owners.items():
        prop = properties[name]
        prop.pop("_descriptions", None)
        if name == discriminator:
            values = [b["properties"][name]["enum"][0] for b in branches]
            prop = {"type": _type_of(values), "enum": values}
            prop["description"] = "; ".join(
                f"{v!r}: {b.get('description', '').strip() or 'mode ' + repr(v)}"
                for v, b in zip(values, branches, strict=True)
            )
        elif len(indices) < len(branches):
            only = ", ".join(labels[i] for i in indices)
            prop["description"] = f"Only for {only}. {prop.get('description', '')}".strip()
        properties[name] = prop
    flat: dict[str, Any] = {"type": "object", "properties": properties}
    required = set.intersection(*(set(b.get("required", [])) for b in branches))
    if required:
        flat["required"] = [n for n in properties if n in required]
    if root.get("description"):
        flat["description"] = root["description"]
    return flat


def _object_branches(root: dict[str, Any]) -> list[dict[str, Any]]:
    """The object branches of a union, nested unions expanded and root siblings merged in."""
    siblings = {k: v for k, v in root.items() if k not in ("anyOf", "type", "description")}
    branches: list[dict[str, Any]] = []
    for branch in root["anyOf"]:
        if branch == {"type": "null"}:
            continue
        merged = {**siblings, **branch}
        if "properties" in siblings and "properties" in branch:
            merged["properties"] = siblings["properties"] | branch["properties"]
        if "required" in siblings and "required" in branch:
            merged["required"] = sorted(set(siblings["required"]) | set(branch["required"]))
        if "anyOf" in branch:
            branches += _object_branches(merged)
            continue
        kind = merged.get("type", "object")
        if kind != "object" and not (isinstance(kind, list) and "object" in kind):
            raise Inexpressible(f"a root union branch is {kind}, not an object")
        merged["type"] = "object"
        branches.append(merged)
    return branches


def _merge_property(seen: dict[str, Any] | None, new: dict[str, Any], label: str) -> dict[str, Any]:
    new = dict(new)
    if seen is None:
        new["_descriptions"] = {label: new.get("description", "")}
        return new
    descriptions = dict(seen.get("_descriptions", {}))
    descriptions[label] = new.get("description", "")
    a = {k: v for k, v in seen.items() if k not in ("description", "_descriptions")}
    b = {k: v for k, v in new.items() if k != "description"}
    if a == b:
        merged = dict(seen)
    elif _same_but_enum(a, b):
        merged = dict(seen)
        merged["enum"] = a["enum"] + [v for v in b["enum"] if v not in a["enum"]]
    else:
        shapes = seen.get("anyOf", [a]) if set(a) == {"anyOf"} else [a]
        merged = {"anyOf": _dedupe([*shapes, b])}
    texts = {t for t in descriptions.values() if t}
    if len(texts) > 1:
        merged["description"] = " ".join(f"For {k}: {t}" for k, t in descriptions.items() if t)
    elif texts:
        merged["description"] = texts.pop()
    merged["_descriptions"] = descriptions
    return merged


def _same_but_enum(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return "enum" in a and "enum" in b and {**a, "enum": None} == {**b, "enum": None}


def _discriminator(branches: list[dict[str, Any]]) -> str | None:
    if len(branches) < 2:
        return None
    for name in branches[0].get("properties", {}):
        values = []
        for branch in branches:
            prop = branch.get("properties", {}).get(name, {})
            enum = prop.get("enum")
            if not (isinstance(enum, list) and len(enum) == 1):
                break
            values.append(enum[0])
        else:
            if len({json.dumps(v) for v in values}) == len(values):
                return str(name)
    return None


def _label(branch: dict[str, Any], discriminator: str | None) -> str:
    if discriminator is None:
        return repr(branch.get("title") or "one variant")
    return f"{discriminator}={branch['properties'][discriminator]['enum'][0]!r}"


def _type_of(values: list[Any]) -> str | list[str]:
    names = {
        "string"
        if isinstance(v, str)
        else "boolean"
        if isinstance(v, bool)
        else "integer"
        if isinstance(v, int)
        else "number"
        if isinstance(v, float)
        else "null"
        if v is None
        else "object"
        for v in values
    }
    return names.pop() if len(names) == 1 else sorted(names)


def _dedupe(schemas: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for schema in schemas:
        key = json.dumps(schema, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(schema)
    return out
