"""Errors: one exception class per wire error code (streams/errors.go).

Every error reply carries ``Reach-Error: <CODE>`` and a ``{"code",
"message"}`` body; :func:`from_code` turns it into the class of that code,
and a handler that raises one of these classes answers with its code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .client import Result


class AgentReachError(Exception):
    """AgentReachError is the base of every error this package raises."""


class ReachError(AgentReachError):
    """ReachError is an error with a wire code (the ``Reach-Error`` header).

    ``result`` holds the error reply when there was one (its headers:
    ``Reach-Node``, ``Reach-Attempt``, …); ``body`` its decoded body.
    """

    code: str = "INTERNAL"
    retryable: bool = False

    def __init__(self, message: str = "", *, result: Optional["Result"] = None, body: Any = None):
        super().__init__(message)
        self.message = message
        self.result = result
        self.body = body

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code


class Timeout(ReachError):
    """Timeout (TIMEOUT): the instance did not answer in time; retried."""

    code = "TIMEOUT"
    retryable = True


class TargetBusy(ReachError):
    """TargetBusy (TARGET_BUSY): no free slot; the dispatcher tries another instance."""

    code = "TARGET_BUSY"
    retryable = True


class BizReject(ReachError):
    """BizReject (BIZ_REJECT): the task was understood and refused; never retried."""

    code = "BIZ_REJECT"


class NoAgent(ReachError):
    """NoAgent (NO_AGENT): no routable instance offers the capability."""

    code = "NO_AGENT"


class CircuitOpen(ReachError):
    """CircuitOpen (CIRCUIT_OPEN): the breakers of every capable instance are open."""

    code = "CIRCUIT_OPEN"


class Overloaded(ReachError):
    """Overloaded (OVERLOADED): the dispatcher is at its in-flight limit."""

    code = "OVERLOADED"


class LoopDetected(ReachError):
    """LoopDetected (LOOP_DETECTED): the chain exceeded its hop or visit limit."""

    code = "LOOP_DETECTED"


class PayloadTooLarge(ReachError):
    """PayloadTooLarge (PAYLOAD_TOO_LARGE): a message exceeds the server's max_payload."""

    code = "PAYLOAD_TOO_LARGE"


class BadRequest(ReachError):
    """BadRequest (BAD_REQUEST): the input is malformed; a retry cannot help."""

    code = "BAD_REQUEST"


class Unauthorized(ReachError):
    """Unauthorized (UNAUTHORIZED): the caller may not do this."""

    code = "UNAUTHORIZED"


class DeadlineExceeded(ReachError):
    """DeadlineExceeded (DEADLINE_EXCEEDED): the overall deadline passed."""

    code = "DEADLINE_EXCEEDED"


class Internal(ReachError):
    """Internal (INTERNAL): the task failed, or its outcome is in doubt.

    ``in_doubt`` is True when the reply said ``Reach-In-Doubt: true``: an
    idempotent execution's owner left before storing its outcome.
    """

    code = "INTERNAL"

    @property
    def in_doubt(self) -> bool:
        """in_doubt reports whether the reply carried Reach-In-Doubt: true."""
        return self.result is not None and self.result.headers.get("Reach-In-Doubt") == "true"


class Incomplete(ReachError):
    """Incomplete (INCOMPLETE): a broadcast or fan-out missed its completion policy.

    ``gathered`` holds what came back all the same.
    """

    code = "INCOMPLETE"
    gathered: Any = None


class Cancelled(ReachError):
    """Cancelled (CANCELLED): the caller cancelled the task before it finished."""

    code = "CANCELLED"


Reject = BizReject
"""Reject is BizReject, the name a handler raises a business rejection by."""

Busy = TargetBusy
"""Busy is TargetBusy, the name a handler says "try another instance" by."""

ERRORS: dict[str, type[ReachError]] = {
    c.code: c
    for c in (
        Timeout,
        TargetBusy,
        BizReject,
        NoAgent,
        CircuitOpen,
        Overloaded,
        LoopDetected,
        PayloadTooLarge,
        BadRequest,
        Unauthorized,
        DeadlineExceeded,
        Internal,
        Incomplete,
        Cancelled,
    )
}
"""ERRORS maps every wire code to its exception class."""


class UnknownCode(ReachError):
    """UnknownCode is an error reply whose code this package does not know."""

    def __init__(self, code: str, message: str = "", **kw: Any):
        super().__init__(message, **kw)
        self.code = code


def from_code(code: str, message: str = "", **kw: Any) -> ReachError:
    """Returns the exception of a wire code; an unknown code keeps its name."""
    cls = ERRORS.get(code)
    if cls is None:
        return UnknownCode(code, message, **kw)
    return cls(message, **kw)


class NoResult(AgentReachError):
    """NoResult: a durable task has no recorded outcome yet."""


class Parked(AgentReachError):
    """Parked: a durable task was dead-lettered or sent for review.

    ``code`` is the wire code of its last failure, ``reason`` the
    Reach-DLQ-Reason (failed, poison, deadline, in_doubt).
    """

    def __init__(self, message: str, *, code: str, reason: str):
        super().__init__(message)
        self.code = code
        self.reason = reason


class ConnectError(AgentReachError, ConnectionError):
    """ConnectError: no connection to NATS — every server refused the first
    dial or none answered within the connect timeout, or the URL or a
    connection option is wrong. ``code`` is ``CONNECT``, the code the
    command lines report it by. Once connected, a connection reconnects on
    its own and raises no ConnectError.
    """

    code = "CONNECT"


class InvalidConfig(AgentReachError, ValueError):
    """InvalidConfig: an agent's configuration, declaration or capability is refused."""
