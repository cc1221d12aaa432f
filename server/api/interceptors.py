"""Server interceptors: API-key authentication, the acting n8n key and caller of a call, and
mapping errors to gRPC status."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc
import structlog

from instance_ai.metadata import ACTING_KEY_KEY
from server.api.caller import caller_from
from server.api.grpc_status import EXPECTED_ERRORS, status_for, trailing_metadata_for
from server.core.caller import acting
from server.core.ids import new_id
from server.errors import InvalidArgumentError
from server.n8n.client import acting_key
from server.store.database import storage_failure

__all__ = [
    "UNAUTHENTICATED_METHODS",
    "ActingCallerInterceptor",
    "ActingKeyInterceptor",
    "ApiKeys",
    "AuthInterceptor",
    "Behavior",
    "ErrorInterceptor",
]

log = structlog.get_logger(__name__)

# Load balancers probe health without credentials.
UNAUTHENTICATED_METHODS = frozenset(
    {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"}
)

Behavior = Callable[..., Any]


def _rewrap(
    handler: grpc.RpcMethodHandler,
    unary: Callable[[Behavior], Behavior],
    streaming: Callable[[Behavior], Behavior],
) -> grpc.RpcMethodHandler:
    """The same handler with its behaviour wrapped, whatever its kind: every one of the four
    (a request stream is just another first argument to the behaviour), so no handler, now or
    added later, escapes authentication or error mapping."""
    if handler.response_streaming:
        kind = "stream_stream" if handler.request_streaming else "unary_stream"
        return handler._replace(**{kind: streaming(getattr(handler, kind))})
    kind = "stream_unary" if handler.request_streaming else "unary_unary"
    return handler._replace(**{kind: unary(getattr(handler, kind))})


class ApiKeys:
    """The configured API keys, as SHA-256 digests: `accept` compares a presented bearer
    token with every one (`hmac.compare_digest`), so timing says nothing about which key or
    how much of it matched. Shared by gRPC and the HTTP endpoint."""

    def __init__(self, keys: list[str]) -> None:
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def accept(self, authorization: str) -> bool:
        # The scheme name is case-insensitive (RFC 9110); the key is not.
        if authorization[:7].lower() != "bearer ":
            return False
        presented = hashlib.sha256(authorization[7:].strip().encode()).digest()
        matched = False
        for digest in self._digests:
            matched |= hmac.compare_digest(presented, digest)
        return matched


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Requires `authorization: Bearer <key>` with one of the configured keys (`ApiKeys`)."""

    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise ValueError("AuthInterceptor needs at least one key")
        self._keys = ApiKeys(keys)

    def _accepts(self, metadata: tuple[tuple[str, str | bytes], ...]) -> bool:
        header = next((v for k, v in metadata if k == "authorization"), None)
        return isinstance(header, str) and self._keys.accept(header)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method in UNAUTHENTICATED_METHODS:
            return handler
        if self._accepts(tuple(details.invocation_metadata or ())):
            return handler
        message = (
            "missing or wrong API key: send metadata 'authorization: Bearer <key>' with a key "
            "from INSTANCE_AI_API_KEYS or INSTANCE_AI_API_KEYS_FILE"
        )

        def unary(_behavior: Behavior) -> Behavior:
            async def reject(_request: Any, context: grpc.aio.ServicerContext) -> None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

            return reject

        def streaming(_behavior: Behavior) -> Behavior:
            async def reject(
                _request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
                yield  # pragma: no cover - abort raises

            return reject

        return _rewrap(handler, unary, streaming)


class ActingKeyInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Makes the call's `x-n8n-api-key` the key of every n8n request made for it (runs the
    call starts inherit it); never logged or kept."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        metadata = details.invocation_metadata or ()
        key = next((v for k, v in metadata if k == ACTING_KEY_KEY), None)
        if handler is None or not isinstance(key, str) or not key.strip():
            return handler
        return _within(handler, acting_key, key.strip())


class ActingCallerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Makes the call's caller (its metadata) the one every change made for it is recorded as
    made by (runs the call starts inherit it). Metadata that names no valid caller sets nothing:
    the servicer refuses it."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        metadata = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        try:
            caller = caller_from(metadata)
        except InvalidArgumentError:
            return handler
        if handler is None:
            return handler
        return _within(handler, acting, caller)


def _within(handler: grpc.RpcMethodHandler, var: ContextVar[Any], value: Any) -> Any:
    """The handler, run with `var` set to `value` for the call (and what it starts)."""

    def unary(behavior: Behavior) -> Behavior:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            token = var.set(value)
            try:
                return await behavior(request, context)
            finally:
                var.reset(token)

        return call

    def streaming(behavior: Behavior) -> Behavior:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            token = var.set(value)
            try:
                async for response in behavior(request, context):
                    yield response
            finally:
                # A stream closed from elsewhere (the client went away, the generator
                # collected) ends in another context, where the token means nothing and
                # which dies with the call.
                with contextlib.suppress(ValueError):
                    var.reset(token)

        return call

    return _rewrap(handler, unary, streaming)


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Turns expected errors into their status (see `server/api/grpc_status.py`), and anything
    unexpected into INTERNAL with a reference the server log carries next to the traceback."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method

        def unary(behavior: Behavior) -> Behavior:
            async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    return await behavior(request, context)
                except Exception as exc:
                    await _abort_with(exc, context, method)

            return call

        def streaming(behavior: Behavior) -> Behavior:
            async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                try:
                    async for response in behavior(request, context):
                        yield response
                except Exception as exc:
                    await _abort_with(exc, context, method)

            return call

        return _rewrap(handler, unary, streaming)


async def _abort_with(exc: Exception, context: grpc.aio.ServicerContext, method: str) -> None:
    if isinstance(exc, grpc.aio.AbortError | asyncio.CancelledError):
        raise exc
    failure = storage_failure(exc)
    if failure is not None:
        log.warning("database unusable", method=method, error=str(failure))
        exc = failure
    if isinstance(exc, EXPECTED_ERRORS):
        context.set_trailing_metadata(trailing_metadata_for(exc))
        await context.abort(status_for(exc), str(exc))
    reference = new_id("err")
    log.error("unexpected error in RPC", method=method, reference=reference, exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL,
        f"internal error (reference {reference}); the server log has the details",
    )
