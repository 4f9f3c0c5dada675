"""Client: call capabilities through the dispatchers (docs/protocol.md, Calling)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Optional, Union

import nats
from nats.aio.client import Client as NATS

from . import _wire as w
from ._connection import DEFAULT_CONNECT_TIMEOUT, dial
from ._typed import decode_as, to_wire
from .errors import (BadRequest, DeadlineExceeded, Incomplete, NoAgent, NoResult, Parked, ReachError,
                     from_code)

if TYPE_CHECKING:  # pragma: no cover
    from .agent import Context
    from .auth import Signer

DEFAULT_TIMEOUT = 60.0
"""DEFAULT_TIMEOUT bounds a call without a timeout or deadline (seconds), like the default deadline."""
READ_TIMEOUT = 10.0  # seconds: one read of a stored result
_DIRECT_GET_HEADERS = frozenset(("Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending",
                                 "Nats-Last-Sequence"))  # what a direct get adds to the stored message


@dataclass
class Result:
    """Result is one reply: its body, content type and Reach-* metadata."""

    data: bytes
    content_type: str
    status: str
    node: str
    attempt: int
    request_id: str
    orchestration_id: str
    cost: float
    headers: w.Headers

    @classmethod
    def of(cls, headers: Optional[dict[str, str]], data: bytes) -> "Result":
        """Returns the Result of a reply's headers and body."""
        h = w.Headers(headers)
        try:
            cost = float(h.get(w.H_COST) or 0)
        except ValueError:
            cost = 0.0
        return cls(data=data, content_type=w.content_type(h, data), status=h.get(w.H_STATUS), node=h.get(w.H_NODE),
                   attempt=h.int(w.H_ATTEMPT), request_id=h.get(w.H_REQUEST_ID),
                   orchestration_id=h.get(w.H_ORCHESTRATION_ID), cost=cost, headers=h)

    @property
    def value(self) -> Any:
        """value is the decoded body."""
        return w.decode(self.content_type, self.data)

    def decode(self, tp: Any = None) -> Any:
        """Returns the body decoded and converted to tp (a dataclass, a pydantic model, …)."""
        return decode_as(tp, self.value)

    @property
    def replayed(self) -> bool:
        """replayed reports a result replayed from an earlier execution (Reach-Replayed)."""
        return self.headers.get(w.H_REPLAYED) == "true"

    def error(self) -> Optional[ReachError]:
        """Returns the error this reply carries (Reach-Error), or None."""
        code = self.headers.get(w.H_ERROR)
        if not code:
            return None
        body: Any = None
        message = ""
        try:
            body = self.value
            if isinstance(body, dict):
                message = str(body.get("message", ""))
        except ReachError:
            pass
        return from_code(code, message, result=self, body=body)


@dataclass
class Branch:
    """Branch is one task of a fan-out: a name, a capability and its payload."""

    name: str
    capability: str
    payload: Any = None
    agent: str = ""
    timeout: float = 0.0  # seconds; 0 leaves it to the fan-out's max_wait

    def wire(self, json_mode: bool) -> dict[str, Any]:
        """Returns the branch as the fan-out body holds it."""
        b: dict[str, Any] = {"name": self.name, "capability": self.capability}
        if self.agent:
            b["agent"] = self.agent
        if self.payload is not None:
            b["payload"] = to_wire(self.payload, json_mode)
        if self.timeout:
            b["timeout_ms"] = int(self.timeout * 1000)
        return b


@dataclass
class BranchResult:
    """BranchResult is what one branch (or, for a broadcast, one instance) answered."""

    name: str
    node: str
    status: str
    attempts: int
    latency_ms: float
    value: Any = None
    error: Optional[ReachError] = None

    def decode(self, tp: Any = None) -> Any:
        """Returns the branch's result converted to tp; raises its error if it failed."""
        if self.error is not None:
            raise self.error
        return decode_as(tp, self.value)


@dataclass
class Gathered:
    """Gathered is the outcome of a broadcast or fan-out (docs/reference.md)."""

    expected: int
    answered: int
    succeeded: int
    complete: bool
    replies: list[BranchResult]
    missing: list[dict[str, str]]
    result: Result
    code: str = ""
    message: str = ""
    by_name: dict[str, BranchResult] = field(default_factory=dict)


class Client:
    """Client calls capabilities through the dispatchers; safe for concurrent use.

    Payloads are encoded as msgpack by default (``content_type=JSON`` for
    JSON); ``bytes`` are sent as they are. Errors are raised as the
    exception class of their wire code (agentreach.errors).
    """

    def __init__(self, nc: NATS, *, source: str = "", content_type: str = w.MSGPACK, prefix: str = w.DEFAULT_PREFIX,
                 signer: Optional["Signer"] = None):
        if content_type not in (w.JSON, w.MSGPACK):
            raise ValueError(f"content_type: want {w.JSON} or {w.MSGPACK}, got {content_type!r}")
        if signer is not None and source and source != signer.name:
            raise ValueError(f"source {source!r} names another identity than the signer's {signer.name!r}")
        self.nc = nc
        self.source = source
        self.content_type = content_type
        self.prefix = prefix
        self.signer = signer
        """signer signs every task and cancel (agentreach.auth); None: unsigned."""
        self._js = nc.jetstream()

    @classmethod
    async def connect(cls, url: Union[str, list[str]] = "nats://127.0.0.1:4222", *,
                      credentials: Optional[str] = None, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                      **kw: Any) -> "Client":
        """Connects to url (a URL, a comma-separated list or a list) and
        returns a client on that connection; with credentials (an
        ``agentreach auth`` identity's file) it connects as that identity
        and signs every task. The first dial tries each server once within
        connect_timeout seconds (default 5) and raises ConnectError when
        none takes it; once connected it reconnects forever."""
        opts: dict[str, Any] = {}
        if credentials is not None:
            from .auth import Credentials

            creds = Credentials.load(credentials)
            opts = creds.connect_options()
            kw.setdefault("signer", creds.signer())
        return cls(await dial(url, name="agentreach client", timeout=connect_timeout, **opts), **kw)

    def _sign(self, subject: str, headers: dict[str, str], body: bytes) -> None:
        if self.signer is not None:
            self.signer.sign(subject, headers, body)

    async def close(self) -> None:
        """Closes the connection."""
        await self.nc.close()

    def _message(self, capability: str, payload: Any, parent: Optional["Context"], *, agent: str = "",
                 request_id: str = "", idempotency_key: str = "", call_timeout: float = 0.0,
                 deadline: Optional[float] = None, budget: Optional[float] = None, affinity_key: str = "",
                 headers: Optional[dict[str, str]] = None, durable: bool = False,
                 extra: Optional[dict[str, str]] = None) -> tuple[dict[str, str], bytes]:
        problem = w.capability_problem(capability)
        if problem:
            raise BadRequest(f"capability: {problem}")
        if request_id:
            problem = w.id_problem(request_id)
            if problem:
                raise BadRequest(f"request_id: {problem}")
        body = payload if isinstance(payload, (bytes, bytearray)) else w.encode(
            self.content_type, to_wire(payload, self.content_type == w.JSON))
        h: dict[str, str] = {w.H_CONTENT_TYPE: self.content_type, w.H_REQUEST_ID: request_id or w.new_request_id()}
        if self.source:
            h[w.H_SOURCE] = self.source
        if parent is not None:
            h[w.H_ORCHESTRATION_ID] = parent.orchestration_id
            h[w.H_HOPS] = str(parent.hops)
            h[w.H_SOURCE] = parent.agent.id
            if parent.traceparent:
                h[w.H_TRACEPARENT] = parent.traceparent
            if parent.visits:
                h[w.H_VISITS] = parent.visits
            if deadline is None or deadline > parent.deadline:
                deadline = parent.deadline  # what remains, never more
        if deadline is not None:
            h[w.H_DEADLINE] = w.unix_ms(deadline)
        if agent:
            h[w.H_AGENT] = agent
        if idempotency_key:
            h[w.H_IDEMPOTENCY_KEY] = idempotency_key
        if call_timeout:
            h[w.H_TIMEOUT] = str(int(call_timeout * 1000))
        if budget is not None:
            h[w.H_BUDGET] = repr(float(budget))
        if affinity_key:
            h[w.H_AFFINITY_KEY] = affinity_key
        if extra:
            h.update(extra)
        if headers:
            h.update(headers)
        return h, bytes(body)

    def _result_source(self) -> str:
        """The token this client's durable results are published under: its
        signer's name, its source, or "_" with neither."""
        try:
            return w.result_source(self.signer.name if self.signer is not None else self.source)
        except ValueError as e:
            raise BadRequest(str(e)) from None

    async def _request(self, subject: str, headers: dict[str, str], body: bytes, timeout: Optional[float],
                       what: str) -> Result:
        """Sends one request and waits for its one reply; when the wait ends
        early (timeout, cancellation) the task is cancelled on reach.cancel."""
        if timeout is None:
            ms = int(headers.get(w.H_DEADLINE, 0) or 0)
            timeout = ms / 1000.0 - time.time() if ms else DEFAULT_TIMEOUT
        if w.H_DEADLINE not in headers:
            headers[w.H_DEADLINE] = w.unix_ms(time.time() + timeout)
        self._sign(subject, headers, body)
        w.check_size(headers, body, self.nc.max_payload)
        rid = headers[w.H_REQUEST_ID]
        try:
            msg = await self.nc.request(subject, body, timeout=max(timeout, 0.001), headers=headers)
        except nats.errors.NoRespondersError:
            raise NoAgent(f"no dispatcher is listening on {subject}") from None
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            await self._cancel(rid)
            raise DeadlineExceeded(f"no answer for {what} within the caller's deadline") from None
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel(rid))
            raise
        return Result.of(msg.headers, msg.data)

    async def _cancel(self, request_id: str) -> None:
        """Tells every dispatcher replica the task is no longer wanted."""
        try:
            h = {w.H_REQUEST_ID: request_id}
            self._sign(f"{self.prefix}.cancel", h, b"")  # with auth on, a dispatcher stops only its signer's tasks
            await self.nc.publish(f"{self.prefix}.cancel", b"", headers=h)
            await self.nc.flush(timeout=1)
        except Exception:  # advisory: a lost cancel only wastes the agent's work
            pass

    async def call(self, capability: str, payload: Any = None, *, timeout: Optional[float] = None,
                   parent: Optional["Context"] = None, **opts: Any) -> Result:
        """Calls a capability and returns its Result; an error reply raises its class.

        ``timeout`` (seconds) bounds the wait and sets the deadline; options:
        agent (unicast), request_id, idempotency_key, call_timeout
        (Reach-Timeout, seconds), deadline (wall-clock seconds), budget,
        affinity_key, headers. Inside a handler use ``ctx.call``.
        """
        if timeout is not None and opts.get("deadline") is None:
            opts["deadline"] = time.time() + timeout
        h, body = self._message(capability, payload, parent, **opts)
        res = await self._request(f"{self.prefix}.task.{capability}", h, body, timeout, f"call {capability}")
        err = res.error()
        if err is not None:
            raise err
        return res

    async def stream(self, capability: str, payload: Any = None, *, timeout: Optional[float] = None,
                     parent: Optional["Context"] = None, **opts: Any) -> AsyncIterator[Result]:
        """Calls a capability asking for its result as a stream (Reach-Stream: 1):
        ``async for r in client.stream(...)`` yields each chunk as a Result with
        status "CHUNK" (its Reach-Seq in headers), then the final Result (the
        whole result, Reach-Chunks); an error reply raises its class. An agent
        that does not stream yields the final Result alone. Leaving the loop
        early, or the timeout, cancels the task on reach.cancel. Options as
        for call."""
        if timeout is not None and opts.get("deadline") is None:
            opts["deadline"] = time.time() + timeout
        h, body = self._message(capability, payload, parent, **opts)
        h[w.H_STREAM] = "1"
        subject = f"{self.prefix}.task.{capability}"
        if timeout is None:
            ms = int(h.get(w.H_DEADLINE, 0) or 0)
            timeout = ms / 1000.0 - time.time() if ms else DEFAULT_TIMEOUT
        if w.H_DEADLINE not in h:
            h[w.H_DEADLINE] = w.unix_ms(time.time() + timeout)
        self._sign(subject, h, body)
        w.check_size(h, body, self.nc.max_payload)
        rid = h[w.H_REQUEST_ID]
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        end = time.monotonic() + timeout
        done = False
        try:
            await self.nc.publish(subject, body, reply=inbox, headers=h)
            while True:
                try:
                    msg = await sub.next_msg(timeout=max(end - time.monotonic(), 0.001))
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    raise DeadlineExceeded(f"no end of the stream of {capability} within the caller's deadline") from None
                if msg.headers and msg.headers.get("Status") == "503":
                    done = True
                    raise NoAgent(f"no dispatcher is listening on {subject}")
                res = Result.of(msg.headers, msg.data)
                if res.status == w.CHUNK:
                    yield res
                    continue
                done = True
                err = res.error()
                if err is not None:
                    raise err
                yield res
                return
        finally:
            await sub.unsubscribe()
            if not done:  # the reader left early, or the wait ended: nobody reads the rest
                await asyncio.shield(self._cancel(rid))

    async def submit(self, capability: str, payload: Any = None, *, parent: Optional["Context"] = None,
                     **opts: Any) -> str:
        """Hands a task to the durable tier and returns its request id once stored.

        Submitting the same request_id again within two minutes is
        deduplicated — per caller: the Nats-Msg-Id is
        ``<source>.<request-id>``, with a signer followed by a proof only
        this identity can make (Signer.submission_id), and another caller's
        task under the same id is a task of its own. A full buffer raises Overloaded.
        """
        h, body = self._message(capability, payload, parent, durable=True, **opts)
        self._sign(f"{self.prefix}.submit.{capability}", h, body)
        try:
            h[w.H_MSG_ID] = (self.signer.submission_id(h[w.H_REQUEST_ID]) if self.signer is not None
                             else f"{w.result_source(h.get(w.H_SOURCE, ''))}.{h[w.H_REQUEST_ID]}")
        except ValueError as e:
            raise BadRequest(str(e)) from None
        w.check_size(h, body, self.nc.max_payload)
        try:
            await self._js.publish(f"{self.prefix}.submit.{capability}", body, headers=h)
        except nats.js.errors.APIError as e:
            # The capability's buffer, or REACH_TASKS as a whole, is full
            # (streams.IsBufferFull).
            if any(full in str(e) for full in ("maximum messages per subject", "maximum bytes exceeded",
                                               "maximum messages exceeded")):
                raise from_code("OVERLOADED", f"the durable buffer of {capability} is full; try again later") from None
            raise
        except nats.errors.NoRespondersError:
            raise RuntimeError(f"submit {capability}: no JetStream stream captures {self.prefix}.submit.{capability} "
                               "(run provisioning first)") from None
        return h[w.H_REQUEST_ID]

    async def result(self, request_id: str) -> Result:
        """Returns the recorded outcome of a durable task this client's caller
        submitted; NoResult while there is none (or none of this caller's).

        A result is published on ``reach.result.<source>.<request-id>`` and
        read only there: <source> is the signer's identity, else the
        client's source, else "_". A stored business rejection is raised as
        BizReject. REACH_RESULTS stores an outcome a moment after wait()
        hears it published, so right after wait() this may still raise
        NoResult.
        """
        subject = f"{self.prefix}.result.{self._result_source()}.{request_id}"
        # A direct get of that one subject: the only read of REACH_RESULTS
        # a caller's permissions allow (STREAM.MSG.GET takes any subject).
        try:
            raw = await self.nc.request(f"$JS.API.DIRECT.GET.{w.STREAM_RESULTS}.{subject}", b"", timeout=READ_TIMEOUT)
        except nats.errors.NoRespondersError:
            raise RuntimeError(f"read {subject}: no stream {w.STREAM_RESULTS} answers direct gets "
                               "(provision it: `agentreach up`, or a dispatcher's start)") from None
        status = (raw.headers or {}).get("Status", "")
        if status == "404":
            raise NoResult(f"no result recorded yet for {request_id}")
        if status:
            raise RuntimeError(f"read {subject}: {status} {(raw.headers or {}).get('Description', '')}")
        headers = {k: v for k, v in (raw.headers or {}).items() if k not in _DIRECT_GET_HEADERS}
        res = Result.of(headers, raw.data or b"")
        err = res.error()
        if err is not None:
            raise err
        return res

    async def wait(self, request_id: str, timeout: float = DEFAULT_TIMEOUT) -> Result:
        """Waits for a durable task's outcome; Parked when it was dead-lettered
        or sent for review while waiting."""
        got: asyncio.Queue[Any] = asyncio.Queue()
        source = self._result_source()
        subject = f"{self.prefix}.result.{source}.{request_id}"

        def own(h: w.Headers) -> bool:  # a parked entry of this caller's task, not another's under the same id
            try:
                return w.result_source(h.get(w.H_SOURCE) or "") == source
            except ValueError:
                return False

        async def on_msg(msg: Any) -> None:
            h = w.Headers(msg.headers)
            if msg.subject == subject or (h.get(w.H_REQUEST_ID) == request_id and own(h)):
                got.put_nowait(msg)

        subs = [await self.nc.subscribe(s, cb=on_msg) for s in (
            subject, f"{self.prefix}.dlq.>", f"{self.prefix}.review.>")]
        try:
            await self.nc.flush()
            try:
                return await self.result(request_id)
            except NoResult:
                pass
            try:
                msg = await asyncio.wait_for(got.get(), timeout)
            except asyncio.TimeoutError:
                raise DeadlineExceeded(f"no outcome for {request_id} within {timeout}s") from None
            h = w.Headers(msg.headers)
            if msg.subject != subject:
                raise Parked(f"task {request_id} parked ({h.get('Reach-DLQ-Reason')}): {h.get('Reach-Last-Error')}",
                             code=h.get(w.H_ERROR), reason=h.get("Reach-DLQ-Reason"))
            res = Result.of(msg.headers, msg.data)
            err = res.error()
            if err is not None:
                raise err
            return res
        finally:
            for s in subs:
                await s.unsubscribe()

    async def broadcast(self, capability: str, payload: Any = None, *, quorum: Optional[float] = None,
                        timeout: Optional[float] = None, parent: Optional["Context"] = None, **opts: Any) -> Gathered:
        """Sends payload to every routable instance of capability once and
        gathers their answers; raises Incomplete (with ``gathered``) when
        the policy (all, or ``quorum``) was not met."""
        if timeout is not None and opts.get("deadline") is None:
            opts["deadline"] = time.time() + timeout
        extra = {w.H_QUORUM: repr(quorum) if isinstance(quorum, float) else str(quorum)} if quorum is not None else None
        h, body = self._message(capability, payload, parent, extra=extra, **opts)
        res = await self._request(f"{self.prefix}.broadcast.{capability}", h, body, timeout, f"broadcast {capability}")
        return self._gathered(res)

    async def fanout(self, branches: list[Union[Branch, dict[str, Any]]], *, mode: str = "", quorum: Optional[float] = None,
                     max_wait: Optional[float] = None, timeout: Optional[float] = None,
                     parent: Optional["Context"] = None, **opts: Any) -> Gathered:
        """Sends each branch to its capability and gathers the answers by the
        completion policy: mode ``all``, ``quorum`` (default, 0.6) or
        ``first``; raises Incomplete (with ``gathered``) when it was not met."""
        json_mode = self.content_type == w.JSON
        req: dict[str, Any] = {"branches": [b.wire(json_mode) if isinstance(b, Branch) else to_wire(b, json_mode)
                                            for b in branches]}
        if mode:
            req["mode"] = mode
        if quorum is not None:
            req["quorum"] = quorum
        if max_wait is not None:
            req["max_wait_ms"] = int(max_wait * 1000)
        if timeout is not None and opts.get("deadline") is None:
            opts["deadline"] = time.time() + timeout
        h, body = self._message("fanout", req, parent, **opts)
        res = await self._request(f"{self.prefix}.fanout", h, body, timeout, "fan-out")
        return self._gathered(res)

    @staticmethod
    def _gathered(res: Result) -> Gathered:
        err = res.error()
        if err is not None and err.code != "INCOMPLETE":
            raise err  # nothing was gathered: a bad request, no instance, overload
        agg = res.value
        if not isinstance(agg, dict):
            raise ValueError(f"unreadable aggregate: {agg!r}")
        replies = []
        for r in agg.get("replies") or []:
            e = r.get("error")
            replies.append(BranchResult(
                name=r.get("name", ""), node=r.get("node", ""), status=r.get("status", ""),
                attempts=int(r.get("attempts") or 0), latency_ms=float(r.get("latency_ms") or 0),
                value=r.get("result"), error=from_code(e.get("code", ""), e.get("message", "")) if e else None))
        g = Gathered(expected=int(agg.get("expected") or 0), answered=int(agg.get("answered") or 0),
                     succeeded=int(agg.get("succeeded") or 0), complete=bool(agg.get("complete")),
                     replies=replies, missing=list(agg.get("missing") or []), result=res,
                     code=agg.get("code", ""), message=agg.get("message", ""),
                     by_name={r.name: r for r in replies})
        if err is not None:
            inc = Incomplete(err.message, result=res, body=agg)
            inc.gathered = g
            raise inc
        return g
