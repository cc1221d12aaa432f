"""The tool catalogue: every tool by name (the service's and those its sources offer now),
each group's services, the schemas providers are shown and the argument validation against
each tool's real model. Calls go through `server/tools/calls.py`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cached_property
from typing import Any

import structlog
from jsonschema import Draft202012Validator
from jsonschema import ValidationError as SchemaError
from jsonschema.validators import validator_for
from pydantic import TypeAdapter, ValidationError

from server.errors import InvalidArgumentError, NotFoundError, UnavailableError
from server.tools.schema import Inexpressible, provider_rule_violations, sanitize
from server.tools.spec import ToolModel, ToolSource, ToolSpec

__all__ = ["ToolInputError", "ToolRegistry", "dump", "for_event", "provider_schema"]

log = structlog.get_logger(__name__)

# Event payloads stay small: long strings are cut, oversized values summarised.
MAX_EVENT_STRING = 2000
MAX_EVENT_BYTES = 64 * 1024


class ToolInputError(InvalidArgumentError):
    """The arguments do not fit the tool; the message tells the model what to fix."""


class ToolRegistry:
    """The tools by name with their provider schemas and their argument validation.

    Each tool group's services object (e.g. `DataTableTools`) is bound here once; a handler
    receives its own group's and nothing else."""

    def __init__(
        self,
        specs: list[ToolSpec[Any]],
        services: Iterable[object] = (),
        *,
        sources: Iterable[ToolSource] = (),
    ) -> None:
        self._specs: dict[str, ToolSpec[Any]] = {}
        self._sources = list(sources)
        self._adapters: dict[str, TypeAdapter[Any]] = {}
        self._services: dict[type, object] = {type(s): s for s in services}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"two tools are named {spec.name}")
            self._specs[spec.name] = spec
            self._adapters[spec.name] = TypeAdapter(spec.input_model)

    # -- what there is ----------------------------------------------------------------------

    def registered(self, spec: ToolSpec[Any]) -> bool:
        """Its group's services are bound and its registration condition holds for them."""
        if spec.services not in self._services:
            return False
        return spec.condition is None or spec.condition(self._services[spec.services])

    def specs(self) -> list[ToolSpec[Any]]:
        """The tools registered here."""
        return [s for s in self._specs.values() if self.registered(s)]

    def get(self, name: str, user_id: str | None = None) -> ToolSpec[Any]:
        """The tool called `name`: one of the service's, or one a source offers now (to
        `user_id`, for a user's own sources such as a filesystem gateway)."""
        spec = self._specs.get(name) or self._dynamic(user_id).get(name)
        if spec is None:
            raise NotFoundError(f"there is no tool {name!r}; ListTools names them all")
        return spec

    def _dynamic(self, user_id: str | None) -> dict[str, ToolSpec[Any]]:
        """The sources' current tools; none may take the name of one of the service's."""
        found: dict[str, ToolSpec[Any]] = {}
        for source in self._sources:
            for spec in source.specs(user_id):
                if spec.name not in self._specs and spec.provider_schema is not None:
                    found.setdefault(spec.name, spec)
        return found

    @cached_property
    def provider_schemas(self) -> dict[str, dict[str, Any]]:
        """Each expressible tool's input schema as providers accept it. A tool that cannot be
        expressed is left out (and logged) rather than failing every request."""
        schemas = {}
        for name, adapter in self._adapters.items():
            schema = provider_schema(name, adapter.json_schema(by_alias=True))
            if schema is not None:
                schemas[name] = schema
        return schemas

    def schema_of(self, spec: ToolSpec[Any]) -> dict[str, Any] | None:
        """The schema the model is shown, None when the tool cannot be expressed."""
        if spec.json_schema is not None:
            return spec.provider_schema
        return self.provider_schemas.get(spec.name)

    def listed(self, user_id: str | None = None) -> list[tuple[ToolSpec[Any], dict[str, Any]]]:
        """The tools a model or client may call, with their provider schemas (with the
        sources' tools for everyone and for `user_id`)."""
        schemas = self.provider_schemas
        static = [(s, schemas[s.name]) for s in self.specs() if s.name in schemas]
        return static + self._dynamic_listed(user_id)

    def _dynamic_listed(self, user_id: str | None) -> list[tuple[ToolSpec[Any], dict[str, Any]]]:
        return [
            (s, s.provider_schema)
            for s in self._dynamic(user_id).values()
            if s.provider_schema is not None and self.registered(s)
        ]

    def overview(
        self, user_id: str | None = None
    ) -> list[tuple[ToolSpec[Any], dict[str, Any], bool]]:
        """Every expressible tool with its schema and whether it is registered here."""
        schemas = self.provider_schemas
        static = [
            (s, schemas[s.name], self.registered(s))
            for s in self._specs.values()
            if s.name in schemas
        ]
        return static + [(s, schema, True) for s, schema in self._dynamic_listed(user_id)]

    def parse(self, spec: ToolSpec[Any], arguments: dict[str, Any]) -> Any:
        """The arguments validated by the tool's real model (the provider schema is looser)."""
        if spec.json_schema is not None:
            return _parse_json(spec, arguments)
        try:
            return self._adapters[spec.name].validate_python(arguments)
        except ValidationError as exc:
            problems = "\n".join(
                f"- {'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
                for error in exc.errors(include_url=False)
            )
            raise ToolInputError(
                f"Invalid arguments for {spec.name}; fix them and call again:\n{problems}"
            ) from None

    def services_of(self, spec: ToolSpec[Any]) -> Any:
        """The services object of the tool's group, handed to its handler."""
        found = self._services.get(spec.services)
        if found is None:
            raise UnavailableError(f"{spec.name} is not set up on this server")
        return found

    def offerable(self, spec: ToolSpec[Any]) -> bool:
        """Registered here, with a schema a model provider accepts."""
        return self.registered(spec) and self.schema_of(spec) is not None


def provider_schema(name: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """`schema` as model providers accept it, None (logged) when it cannot be expressed."""
    try:
        sanitized = sanitize(schema)
    except Inexpressible as exc:
        log.warning("dropping tool: its input schema cannot be sent", tool=name, why=str(exc))
        return None
    problems = provider_rule_violations(name, sanitized)
    if problems:
        log.warning("dropping tool", tool=name, why="; ".join(problems))
        return None
    return sanitized


def _parse_json(spec: ToolSpec[Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments checked against a JSON-Schema tool's real schema (its own draft, else
    2020-12), every problem listed so the model can correct them all at once."""
    assert spec.json_schema is not None
    validator_class = validator_for(spec.json_schema, default=Draft202012Validator)
    problems = sorted(
        validator_class(spec.json_schema).iter_errors(arguments), key=lambda e: list(e.path)
    )
    if problems:
        lines = "\n".join(f"- {_where(p)}: {p.message[:300]}" for p in problems[:20])
        raise ToolInputError(
            f"Invalid arguments for {spec.name}; fix them and call again:\n{lines}"
        )
    return arguments


def _where(problem: SchemaError) -> str:
    return ".".join(str(p) for p in problem.absolute_path) or "arguments"


def dump(result: ToolModel) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def for_event(value: Any) -> Any:
    """`value` bounded for an event payload."""
    bounded = _cut_strings(value)
    size = len(json.dumps(bounded))
    if size > MAX_EVENT_BYTES:
        return {"omitted": f"{size} bytes; the caller received it in full"}
    return bounded


def _cut_strings(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_EVENT_STRING:
        return value[:MAX_EVENT_STRING] + f"… [{len(value) - MAX_EVENT_STRING} more characters]"
    if isinstance(value, dict):
        return {k: _cut_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v) for v in value]
    return value
