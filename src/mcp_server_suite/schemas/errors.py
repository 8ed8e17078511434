"""The exception hierarchy, and `to_wire`, the one place where an exception becomes JSON.

Rules:

1. Every error the server raises on purpose is a `SuiteError` and carries its wire code.
2. `ProtocolError` and its subclasses travel as JSON-RPC `error` objects: the message was
   wrong. `ToolFailure` and its subclasses travel in-band as problem documents: the call was
   refused or failed because of what the caller asked.
3. The text of an exception (`str(exc)`) never reaches the client. Messages and details are
   composed by the raising code from values the caller sent.
4. Anything that is not a `SuiteError` is a bug: it becomes `-32603` with a correlation id,
   and the traceback goes to stderr under that id.
"""

import os
from collections.abc import Mapping
from typing import ClassVar, Final, TypeAlias

from mcp_server_suite.schemas.problems import JSONRPCCode, MCPErrorCode, MetadataValue, Problem

__all__ = [
    "DeadlineExceeded",
    "InvalidParams",
    "MethodNotFound",
    "ParseError",
    "PolicyViolation",
    "ProtocolError",
    "RequestId",
    "SuiteError",
    "ToolFailure",
    "UnsupportedVersion",
    "internal_error",
    "new_correlation_id",
    "to_wire",
]

# JSON-RPC request ids this server accepts: strings, and integers in the I-JSON safe range.
RequestId: TypeAlias = str | int

GENERIC_INTERNAL_MESSAGE: Final = "Internal error"


class SuiteError(Exception):
    """Base of every error the server raises on purpose."""

    jsonrpc_code: ClassVar[JSONRPCCode] = JSONRPCCode.INTERNAL_ERROR


class ProtocolError(SuiteError):
    """The peer broke JSON-RPC 2.0 or MCP; answered with a JSON-RPC error object.

    Args:
        message: The JSON-RPC `error.message`, written by the server.
        request_id: The id to answer, or None when the id could not be read.
        data: Optional `error.data`, already plain JSON data.
    """

    jsonrpc_code = JSONRPCCode.INVALID_REQUEST

    def __init__(
        self,
        message: str,
        *,
        request_id: RequestId | None = None,
        data: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.data = data


class ParseError(ProtocolError):
    """The bytes were not one strict JSON value (invalid UTF-8, syntax, duplicates...)."""

    jsonrpc_code = JSONRPCCode.PARSE_ERROR


class MethodNotFound(ProtocolError):
    """The method is not one this server implements."""

    jsonrpc_code = JSONRPCCode.METHOD_NOT_FOUND


class InvalidParams(ProtocolError):
    """The method exists but its params are wrong; `data` carries the problem.

    Args:
        message: The JSON-RPC `error.message`, which is also the problem's detail.
        request_id: The id to answer.
        invalid_params: The members of `params` the caller should correct.
        code: The problem type: malformed params by default, or a more particular type
            (an invalid cursor, an unknown tool's arguments).
    """

    jsonrpc_code = JSONRPCCode.INVALID_PARAMS

    def __init__(
        self,
        message: str,
        *,
        request_id: RequestId | None,
        invalid_params: tuple[str, ...],
        code: MCPErrorCode = MCPErrorCode.INVALID_PARAMS,
    ) -> None:
        problem = Problem.of(code, message, invalid_params=invalid_params)
        super().__init__(message, request_id=request_id, data=problem.as_dict())


class UnsupportedVersion(ProtocolError):
    """A modern request names a protocol version the server does not serve (MCP 2026-07-28).

    The data is the schema's `UnsupportedProtocolVersionError.data`: what the session can
    still use, and what was asked for.

    Args:
        requested: The version the request named, as the client sent it.
        supported: The versions the client may retry with, newest first.
        request_id: The id to answer.
        message: The JSON-RPC `error.message`.
    """

    jsonrpc_code = JSONRPCCode.UNSUPPORTED_PROTOCOL_VERSION

    def __init__(
        self,
        requested: str,
        supported: tuple[str, ...],
        *,
        request_id: RequestId,
        message: str = "Unsupported protocol version",
    ) -> None:
        super().__init__(
            message,
            request_id=request_id,
            data={"supported": list(supported), "requested": requested},
        )


class ToolFailure(SuiteError):
    """A call refused or failed because of what the caller asked: an in-band problem.

    Args:
        code: The problem's error code.
        detail: One sentence about this occurrence, written by the server.
        invalid_params: Arguments the caller should correct.
        metadata: Flat machine-readable facts, such as `retryable`.
    """

    default_code: ClassVar[MCPErrorCode] = MCPErrorCode.VALIDATION_ERROR

    def __init__(
        self,
        detail: str,
        *,
        code: MCPErrorCode | None = None,
        invalid_params: tuple[str, ...] = (),
        metadata: dict[str, MetadataValue] | None = None,
    ) -> None:
        super().__init__(detail)
        self.problem = Problem.of(
            code or self.default_code,
            detail,
            invalid_params=invalid_params,
            metadata=metadata,
        )


class PolicyViolation(ToolFailure):
    """A guardrail refused the call before the tool ran."""


class DeadlineExceeded(ToolFailure):
    """The call did not finish before its deadline."""

    default_code = MCPErrorCode.EXECUTION_TIMEOUT


def new_correlation_id() -> str:
    """Return a short random id that ties a generic client error to a stderr traceback."""
    return os.urandom(8).hex()


def to_wire(exc: BaseException, *, correlation_id: str | None = None) -> dict[str, object]:
    """Turn an exception into a JSON-RPC error object (`code`, `message`, optional `data`).

    Args:
        exc: The exception to report.
        correlation_id: For exceptions that are not `ProtocolError`, the id already logged
            with the traceback; a fresh one is made when it is None.

    Returns:
        The error object. A `ProtocolError` keeps its message and data; a `ToolFailure`
        travels with its problem as data; anything else becomes a generic `-32603`.
    """
    if isinstance(exc, ProtocolError):
        error: dict[str, object] = {"code": int(exc.jsonrpc_code), "message": exc.message}
        if exc.data is not None:
            error["data"] = dict(exc.data)
        return error
    if isinstance(exc, ToolFailure):
        return {
            "code": int(exc.problem.jsonrpc_code),
            "message": exc.problem.title,
            "data": exc.problem.as_dict(),
        }
    return internal_error(correlation_id or new_correlation_id())


def internal_error(correlation_id: str) -> dict[str, object]:
    """Return the generic `-32603` error object for an unexpected failure.

    Args:
        correlation_id: The id logged to stderr with the traceback.

    Returns:
        The error object; it carries the correlation id and nothing about the failure.
    """
    problem = Problem.of(
        MCPErrorCode.INTERNAL_ERROR,
        "The server failed while handling this request.",
        metadata={"correlation_id": correlation_id},
    )
    return {
        "code": int(JSONRPCCode.INTERNAL_ERROR),
        "message": GENERIC_INTERNAL_MESSAGE,
        "data": problem.as_dict(),
    }
