"""Agent: serve capabilities over NATS by the protocol of docs/protocol.md."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import decimal
import inspect
import json
import logging
import secrets
import signal
import time
from typing import Any, Callable, Optional, Union

import nats
from nats.aio.client import DEFAULT_INBOX_PREFIX
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from . import _wire as w
from ._connection import dial, flush
from ._heartbeat import Heartbeat
from ._micro import Service
from ._idempotency import ClaimFailed, Idempotency, InDoubt, Outcome
from ._typed import convert, payload_type, to_wire
from .auth import Credentials
from .client import Client, Result
from .declaration import validate as validate_declaration
from .errors import (BadRequest, Cancelled, DeadlineExceeded, Internal, InvalidConfig, NoAgent, PayloadTooLarge,
                     ReachError, TargetBusy, from_code)

log = logging.getLogger("agentreach")

DEFAULT_MAX_CONCURRENT = 8
DEFAULT_DRAIN_TIMEOUT = 30.0
START_TIMEOUT = 10.0
ACK_DELAY = 0.020
"""ACK_DELAY: how long the ACKED is held back; a result ready within it replaces it."""
_PROBE_WAIT = 0.1

Handler = Callable[["Context", Any], Any]


class Context:
    """Context is one task as its handler sees it.

    It carries the task's ids, trace context, source, idempotency key and
    deadline, a ``cancelled`` event (set when the dispatcher sends a CANCEL
    for this delivery: nobody will use the answer), and calls further
    agents with the orchestration id, hops, visits and remaining deadline
    carried on (``await ctx.call("cap", payload)``).
    """

    def __init__(self, agent: "Agent", msg: Msg, headers: w.Headers, content_type: str):
        self.agent = agent
        self.headers = headers
        self.capability = headers.get(w.H_CAPABILITY)
        self.request_id = headers.get(w.H_REQUEST_ID)
        self.orchestration_id = headers.get(w.H_ORCHESTRATION_ID) or self.request_id
        self.attempt = headers.int(w.H_ATTEMPT)
        self.hops = headers.int(w.H_HOPS)
        self.visits = headers.get(w.H_VISITS)
        self.traceparent = headers.get(w.H_TRACEPARENT)
        self.source = headers.get(w.H_SOURCE)
        self.idempotency_key = headers.get(w.H_IDEMPOTENCY_KEY)
        self.deadline = w.deadline_of(headers)
        """deadline is the task's overall deadline, wall-clock seconds (time.time())."""
        self.content_type = content_type
        self.data: bytes = msg.data
        self.cancelled = asyncio.Event()
        self.cost: Optional[float] = None
        self._reply = msg.reply
        self._reply_to = headers.get(w.H_REPLY_TO)
        self._answered = False  # ACKED, PROCESSING or the final reply has gone out
        self._final = False
        self._holds_slot = False
        self._ack_timer: Optional[asyncio.TimerHandle] = None
        self._last_send: Optional[asyncio.Future[None]] = None
        self._loop = agent._loop
        self._chunks = 0  # CHUNK messages sent (send)

    def remaining(self) -> float:
        """Returns the seconds left until the deadline (negative once past)."""
        return self.deadline - time.time()

    def progress(self) -> None:
        """Sends PROCESSING (ACKED first if it has not gone out), restarting
        the dispatcher's per-call timeout. Safe from any thread; it does not
        wait for the message to leave."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._progress()
        else:
            self._loop.call_soon_threadsafe(self._progress)

    def _progress(self) -> None:
        if self._final:
            return
        self._ack()
        self._send_later(self._reply, {w.H_STATUS: w.PROCESSING, w.H_REQUEST_ID: self.request_id,
                                       w.H_NODE: self.agent.id}, b"")

    @property
    def streaming(self) -> bool:
        """streaming is True when the caller asked for the result as a stream
        (Reach-Stream: 1 on the delivery); send does nothing otherwise."""
        return self.headers.get(w.H_STREAM) == "1"

    async def send(self, chunk: Any) -> None:
        """Streams one piece of the result to the caller as the next CHUNK
        (Reach-Seq 1, 2, ...), encoded like the result (bytes as they are).
        The handler's return value is still the whole result, which callers
        that did not stream, durable callers and replays get alone. Does
        nothing when the caller did not ask for a stream; raises
        RuntimeError once the result has gone out. On the event loop only."""
        if not self.streaming:
            return
        if self._final:
            raise RuntimeError("the task has answered: no chunk may follow")
        body = chunk if isinstance(chunk, (bytes, bytearray)) else w.encode(
            self.content_type, to_wire(chunk, self.content_type == w.JSON))
        self._ack()
        self._chunks += 1
        h = {w.H_STATUS: w.CHUNK, w.H_REQUEST_ID: self.request_id, w.H_SEQ: str(self._chunks),
             w.H_CONTENT_TYPE: self.content_type}
        w.check_size(h, bytes(body), self.agent.max_payload)
        self._send_later(self._reply, h, bytes(body))
        await self._sent()

    def set_cost(self, cost: float) -> None:
        """Records what the task cost; it travels in the Reach-Cost header."""
        if cost < 0:
            raise ValueError("cost must not be negative")
        self.cost = cost

    def _cost_header(self) -> str:
        if not self.cost:
            return ""
        text = format(decimal.Decimal(repr(float(self.cost))), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text

    def _ack(self) -> None:
        """Sends ACKED unless something has gone out already."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self._answered:
            return
        self._answered = True
        self._send_later(self._reply, {w.H_STATUS: w.ACKED, w.H_REQUEST_ID: self.request_id,
                                       w.H_ACTIVE: str(self.agent.active), w.H_NODE: self.agent.id}, b"")

    def _send_later(self, subject: str, headers: dict[str, str], body: bytes) -> None:
        """Publishes after everything this task sent before, in order."""
        prev = self._last_send

        async def send() -> None:
            if prev is not None:
                await prev
            await self.agent._publish(subject, headers, body)

        self._last_send = asyncio.ensure_future(send())

    async def _sent(self) -> None:
        if self._last_send is not None:
            await self._last_send

    # Calling further agents: the chain's ids, hops, visits and deadline travel on.

    async def call(self, capability: str, payload: Any = None, **kw: Any) -> Result:
        """Calls a capability through the dispatchers as a step of this task."""
        return await self.agent.client.call(capability, payload, parent=self, **kw)

    async def submit(self, capability: str, payload: Any = None, **kw: Any) -> str:
        """Submits a durable task as a step of this task; returns its request id."""
        return await self.agent.client.submit(capability, payload, parent=self, **kw)

    async def broadcast(self, capability: str, payload: Any = None, **kw: Any) -> Any:
        """Broadcasts to every instance of a capability as a step of this task."""
        return await self.agent.client.broadcast(capability, payload, parent=self, **kw)

    async def fanout(self, branches: list[Any], **kw: Any) -> Any:
        """Fans out to several capabilities as a step of this task."""
        return await self.agent.client.fanout(branches, parent=self, **kw)


class _Registered:
    def __init__(self, fn: Handler):
        self.fn = fn
        self.is_gen = inspect.isasyncgenfunction(fn)
        self.is_async = inspect.iscoroutinefunction(fn) or self.is_gen
        self.payload_type = payload_type(fn)


class Agent:
    """Agent serves capabilities: register handlers, then ``await agent.run()``.

    ``nc_or_url`` is a connected nats-py client or a server URL (the agent
    then connects and closes itself). Heartbeats always use a connection of
    their own, on a thread of their own. ``max_concurrent`` tasks run at
    once (beyond: TARGET_BUSY); ``declaration`` is the capability
    declaration written to REACH_CAPS at start (see agentreach.declaration).
    Unless ``micro=False`` it also answers the NATS micro protocol
    (``$SRV.PING``, ``INFO``, ``STATS``), so ``nats micro ls`` lists it.

    Handlers are ``async def handler(ctx, payload)`` (run on the event
    loop) or plain ``def`` (run on a thread pool of max_concurrent
    threads, for blocking or CPU-bound work). The payload is decoded by the
    request's content type and converted to the parameter's annotation:
    a dataclass, a pydantic model, ``bytes`` for the raw body, or none for
    the decoded value. A handler returns the result (``bytes`` are sent as
    they are) or raises: Reject, Busy, BadRequest or another ReachError for
    its code, anything else for INTERNAL with the message.
    """

    def __init__(self, nc_or_url: Union[NATS, str, list[str]], *, type: str, id: Optional[str] = None,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT, weight: int = 100, version: str = "0.0.0",
                 timeout_hint: float = 0.0, declaration: Optional[dict[str, Any]] = None,
                 drain_timeout: float = DEFAULT_DRAIN_TIMEOUT, prefix: str = w.DEFAULT_PREFIX,
                 credentials: Optional[str] = None, micro: bool = True):
        problem = w.capability_problem(type)
        if problem:
            raise InvalidConfig(f"type: {problem}")
        if id is None:
            id = f"{type.replace('.', '-')}-{secrets.token_hex(5)}"
        problem = w.id_problem(id)
        if problem:
            raise InvalidConfig(f"id: {problem}")
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise InvalidConfig(f"max_concurrent: must be an integer of at least 1, got {max_concurrent!r}")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 10000:
            raise InvalidConfig(f"weight: must be an integer from 1 to 10000, got {weight!r}")
        if timeout_hint < 0:
            raise InvalidConfig(f"timeout_hint: must not be negative, got {timeout_hint!r}")
        if drain_timeout <= 0:
            raise InvalidConfig(f"drain_timeout: must be positive, got {drain_timeout!r}")
        if not isinstance(version, str):
            raise InvalidConfig("version: must be a string")
        if declaration is not None and not isinstance(declaration, dict):
            raise InvalidConfig(f"declaration: must be a dict, got {declaration.__class__.__name__}")
        self._creds: Optional[Credentials] = None
        if credentials is not None:  # an identity of `agentreach auth agent <id> --type <type>`
            self._creds = Credentials.load(credentials)
            if self._creds.role and (self._creds.name != id or self._creds.type != type):
                raise InvalidConfig(f"credentials: {credentials} are agent {self._creds.name!r} of type "
                                    f"{self._creds.type!r}, not {id!r} of type {type!r}")
        self.id = id
        self.type = type
        self.max_concurrent = max_concurrent
        self.weight = weight
        self.version = version
        # This run of the instance: new at each start under the id. Its
        # idempotency claims carry it, so a claim of an earlier run is not
        # taken for one it is executing (docs/protocol.md, Idempotency).
        self.incarnation = secrets.token_hex(8)
        self.timeout_hint = timeout_hint
        self.declaration = declaration
        self.drain_timeout = drain_timeout
        self.prefix = prefix
        self.micro = micro
        """micro: whether the agent answers the NATS micro protocol (``nats micro ls``)."""
        self._target = nc_or_url
        self._nc: Optional[NATS] = None
        self._own_nc = False
        self._handlers: dict[str, _Registered] = {}
        self._started = False
        self._draining = False
        self._tasks: dict[str, Context] = {}  # by delivery reply subject
        self._runners: set[asyncio.Task[None]] = set()
        self.active = 0
        """active is the number of slots held now."""
        self._hb: Optional[Heartbeat] = None
        self._sub: Any = None
        self._micro: Optional[Service] = None  # answers $SRV.PING, INFO, STATS (NATS micro)
        self._idem: Optional[Idempotency] = None
        self._reply_prefix = ""
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._drained: Optional[asyncio.Future[None]] = None
        self.client: Client = None  # type: ignore[assignment]
        self.max_payload = 0

    # Registration.

    def handler(self, capability: str) -> Callable[[Handler], Handler]:
        """Returns a decorator registering the handler of a capability."""

        def register(fn: Handler) -> Handler:
            self.handle(capability, fn)
            return fn

        return register

    def handle(self, capability: str, fn: Handler) -> None:
        """Registers fn as the handler of capability; before start only."""
        problem = w.capability_problem(capability)
        if problem:
            raise InvalidConfig(f"capability: {problem}")
        if self._started:
            raise InvalidConfig(f"capability {capability!r}: handlers are registered before start")
        if capability in self._handlers:
            raise InvalidConfig(f"capability {capability!r} registered twice")
        if not callable(fn):
            raise InvalidConfig(f"capability {capability!r}: the handler is not callable")
        try:
            self._handlers[capability] = _Registered(fn)
        except TypeError as e:
            raise InvalidConfig(f"capability {capability!r}: {e}") from None

    @property
    def capabilities(self) -> list[str]:
        """capabilities lists the capabilities served, sorted."""
        return sorted(self._handlers)

    def record(self) -> dict[str, Any]:
        """Returns the agent record as it is heartbeated now (without heartbeat_ms)."""
        return {"id": self.id, "type": self.type, "capabilities": self.capabilities,
                "max_concurrent": self.max_concurrent, "weight": self.weight, "active": self.active,
                "status": "draining" if self._draining else "ready",
                "timeout_hint_ms": int(self.timeout_hint * 1000), "version": self.version,
                "incarnation": self.incarnation}

    @property
    def heartbeat_ms(self) -> int:
        """heartbeat_ms is the interval read from REACH_AGENTS at start (0 before)."""
        return self._hb.heartbeat_ms if self._hb else 0

    # Life cycle.

    async def run(self, *, signals: bool = True) -> None:
        """Starts, serves until SIGTERM or SIGINT (or cancellation), then drains."""
        await self.start()
        stop = asyncio.Event()
        installed = []
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._loop.add_signal_handler(sig, stop.set)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
                    pass
        try:
            await stop.wait()
        finally:
            for sig in installed:
                self._loop.remove_signal_handler(sig)
            await asyncio.shield(self.drain())

    async def start(self) -> None:
        """Connects, subscribes and registers; the agent is routable once it returns.

        A declaration or configuration that does not validate is refused
        here with the field named (InvalidConfig), before anything is put.
        """
        if self._started:
            raise InvalidConfig("the agent is already started")
        if not self._handlers:
            raise InvalidConfig("no capability handlers registered")
        decl = None
        if self.declaration is not None:
            decl = validate_declaration(self.declaration, self.type, self._handlers)
        self._loop = asyncio.get_running_loop()
        self._started = True
        try:
            await asyncio.wait_for(self._start(decl), START_TIMEOUT)
        except BaseException:
            await self._close()
            raise

    async def _start(self, decl: Optional[dict[str, Any]]) -> None:
        servers, connect = self._connect_args()
        if isinstance(self._target, NATS):
            self._nc = self._target
        else:
            self._nc = await dial(servers, **connect)
            self._own_nc = True
        self.max_payload = self._nc.max_payload
        self._hb = Heartbeat(self.id, servers, {**connect, "name": f"agentreach {self.id} heartbeat"}, self.record)
        heartbeat_ms = await self._hb.open()
        js = self._nc.jetstream()
        try:
            idem_kv = await js.key_value(w.BUCKET_IDEMPOTENCY)
            agents_kv = await js.key_value(w.BUCKET_AGENTS)
        except nats.js.errors.NotFoundError as e:
            raise RuntimeError(f"the {w.BUCKET_IDEMPOTENCY} bucket is missing (is the topology provisioned?)") from e
        # Half the slots at most wait on an unanswered claim: the other half
        # still serve calls without an idempotency key while the bucket has
        # no leader (4-9 s after a partition heals).
        self._idem = Idempotency(idem_kv, agents_kv, self.id, heartbeat_ms / 1000.0, self.incarnation,
                                 max_retrying=max(self.max_concurrent // 2, 1))
        if decl is not None:
            caps = await js.key_value(w.BUCKET_CAPS)
            await caps.put(self.type, json.dumps(decl).encode())
        self.client = Client(self._nc, source=self.id, prefix=self.prefix,
                             signer=self._creds.signer() if self._creds is not None and self._creds.verifier else None)
        if any(not h.is_async for h in self._handlers.values()):
            self._executor = concurrent.futures.ThreadPoolExecutor(self.max_concurrent,
                                                                   thread_name_prefix=f"agentreach-{self.id}")
        self._reply_prefix = await self._probe()
        if self.micro:
            desc = str((self.declaration or {}).get("description") or f"Agent-Reach agent type {self.type}")
            self._micro = Service(self.type, self.id, self.version, desc, f"{self.prefix}.agent.{self.id}",
                                  self.capabilities)
            await self._micro.start(self._nc)
        self._sub = await self._nc.subscribe(f"{self.prefix}.agent.{self.id}", cb=self._deliver)
        await flush(self._nc)  # the server has the subscription before any dispatcher sees the record
        await self._hb.put()
        self._hb.start()
        log.info("agent registered agent=%s capabilities=%s max_concurrent=%d heartbeat_ms=%d direct_results=%s",
                 self.id, ",".join(self.capabilities), self.max_concurrent, heartbeat_ms, bool(self._reply_prefix))

    def _connect_args(self) -> tuple[list[str], dict[str, Any]]:
        """Returns the servers and options to connect with (the heartbeat's too)."""
        t = self._target
        own: dict[str, Any] = {"name": f"agentreach {self.id}"}
        if self._creds is not None:
            own.update(self._creds.connect_options())
        if isinstance(t, str):
            return [t], own
        if isinstance(t, list):
            return list(t), own
        if isinstance(t, NATS):
            opts = {k: t.options.get(k) for k in ("user", "password", "token", "tls", "tls_hostname")
                    if t.options.get(k) is not None}
            for attr, kw in (("_user_credentials", "user_credentials"), ("_nkeys_seed", "nkeys_seed"),
                             ("_nkeys_seed_str", "nkeys_seed_str")):
                if getattr(t, attr, None):
                    opts[kw] = getattr(t, attr)
            if bytes(t._inbox_prefix) != DEFAULT_INBOX_PREFIX:  # an identity reads only its own
                opts["inbox_prefix"] = bytes(t._inbox_prefix)
            return [u.geturl() for u in t.servers], opts
        raise InvalidConfig(f"nc_or_url: want a nats-py client or a server URL, got {t.__class__.__name__}")

    async def _probe(self) -> str:
        """Returns the inbox prefix this connection may publish to, "" when it may not.

        An agent with an identity's credentials skips the probe and answers
        through the dispatcher: such an identity may publish to no inbox, its
        own included (the probe would only earn a permissions violation)."""
        assert self._nc is not None
        if self._creds is not None:
            return ""
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        try:
            await self._nc.publish(inbox, b"")
            await self._nc.flush()
            await sub.next_msg(timeout=_PROBE_WAIT)
            return inbox[: inbox.rindex(".") + 1]
        except Exception:
            return ""
        finally:
            await sub.unsubscribe()

    async def drain(self) -> None:
        """Leaves: puts status draining, finishes every task in flight and
        sends its result, flushes, unsubscribes and deletes the record.
        Calling it again waits for the first drain."""
        if not self._started:
            raise InvalidConfig("the agent is not started")
        if self._drained is None:
            self._drained = asyncio.ensure_future(self._drain())
        await asyncio.shield(self._drained)

    async def _drain(self) -> None:
        assert self._hb is not None and self._nc is not None
        self._draining = True
        errors = []
        try:
            await self._hb.put()
        except Exception as e:
            errors.append(f"put the draining record: {e!r}")
        if self._sub is not None:
            try:
                await self._sub.drain()  # deliveries already queued are still served
            except Exception as e:
                errors.append(f"unsubscribe: {e!r}")
        if self._micro is not None:
            await self._micro.stop()
        if self._runners:
            _, late = await asyncio.wait(set(self._runners), timeout=self.drain_timeout)
            if late:
                errors.append(f"{len(late)} tasks still running after {self.drain_timeout}s, cancelled")
                for t in late:
                    t.cancel()
                await asyncio.wait(late)
        try:
            await flush(self._nc)  # every answer is out before the record goes
        except Exception as e:
            errors.append(f"flush the answers: {e!r}")
        try:
            await self._hb.stop(delete=True)
        except Exception as e:
            errors.append(f"delete the record: {e!r}")
        await self._close()
        log.info("agent drained agent=%s errors=%s", self.id, errors)
        if errors:
            raise RuntimeError("drain: " + "; ".join(errors))

    async def _close(self) -> None:
        if self._idem is not None:
            await self._idem.close()
        if self._hb is not None:
            await self._hb.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        if self._own_nc and self._nc is not None and not self._nc.is_closed:
            await self._nc.close()

    # Serving.

    async def _publish(self, subject: str, headers: dict[str, str], body: bytes) -> None:
        assert self._nc is not None
        try:
            await self._nc.publish(subject, body, headers=headers)
        except Exception as e:
            log.warning("reply failed agent=%s subject=%s status=%s error=%r", self.id, subject,
                        headers.get(w.H_STATUS), e)

    async def _deliver(self, msg: Msg) -> None:
        """Takes one delivery on the subscription's task: answers at once what
        needs no work and starts a runner for the rest."""
        headers = w.Headers(msg.headers)
        if not msg.reply:
            if headers.get(w.H_STATUS) == w.CANCEL:
                self._cancel(headers)
            return
        ctx = Context(self, msg, headers, w.content_type(headers, msg.data))
        reg = self._handlers.get(ctx.capability)
        if reg is None:
            await self._fail(ctx, NoAgent(f"agent {self.id} does not serve capability {ctx.capability!r}"))
            return
        if ctx.content_type not in (w.JSON, w.MSGPACK):
            await self._fail(ctx, BadRequest(f"unsupported content type {ctx.content_type!r} "
                                             f"(want {w.JSON} or {w.MSGPACK})"))
            return
        if self.active >= self.max_concurrent:
            await self._fail(ctx, TargetBusy(f"agent {self.id} has all {self.max_concurrent} slots busy"))
            return
        self.active += 1
        ctx._holds_slot = True
        self._tasks[msg.reply] = ctx
        ctx._ack_timer = self._loop.call_later(ACK_DELAY, ctx._ack)
        runner = self._loop.create_task(self._run(reg, ctx))
        self._runners.add(runner)
        runner.add_done_callback(self._runners.discard)

    def _cancel(self, headers: w.Headers) -> None:
        """Sets the cancelled event of the delivery a CANCEL names (by
        Reach-Delivery; from a sender that does not say, by request id and
        attempt). A cancel for a delivery not running here is ignored."""
        delivery = headers.get(w.H_DELIVERY)
        if delivery:
            ctx = self._tasks.get(delivery)
            if ctx is not None:
                ctx.cancelled.set()
            return
        rid, attempt = headers.get(w.H_REQUEST_ID), headers.get(w.H_ATTEMPT)
        for ctx in self._tasks.values():
            if ctx.request_id == rid and (not attempt or attempt == str(ctx.attempt)):
                ctx.cancelled.set()

    async def _run(self, reg: _Registered, ctx: Context) -> None:
        pending: Optional[asyncio.Future[Any]] = None
        try:
            key = ""
            if ctx.remaining() <= 0:
                await self._fail(ctx, DeadlineExceeded("the task's deadline passed before it started"))
                return
            if ctx.cancelled.is_set():
                await self._fail(ctx, Cancelled("cancelled before it started"))
                return
            if ctx.idempotency_key:
                key = w.idempotency_bucket_key(ctx.capability, ctx.source or "", ctx.idempotency_key)
                if await self._begin(ctx, key):
                    return
            began = time.monotonic()
            headers, body, pending = await self._execute(reg, ctx)
            if self._micro is not None:
                self._micro.count(ctx.capability, time.monotonic() - began, headers.get(w.H_ERROR, ""))
            if key:
                await self._settle(ctx, key, headers, body)
            # A thread past its deadline runs on: its slot stays held until it ends.
            await self._answer(ctx, headers, body, free=pending is None)
            if pending is not None:
                await asyncio.wait({pending})
        finally:
            self._tasks.pop(ctx._reply, None)
            self._free(ctx)

    async def _begin(self, ctx: Context, key: str) -> bool:
        """Claims an idempotency key; returns True when the task is answered."""
        assert self._idem is not None
        k = ctx.idempotency_key
        try:
            stored = await self._idem.begin(key, ctx.request_id, ctx.deadline, ctx.progress)
        except asyncio.TimeoutError:
            await self._fail(ctx, from_code("TIMEOUT", f"waiting for another execution of idempotency key {k!r}"))
            return True
        except InDoubt as e:
            await self._fail(ctx, Internal(f"idempotency key {k!r}: outcome in doubt: {e}"),
                             {w.H_IN_DOUBT: "true"})
            return True
        except ClaimFailed as e:  # nothing ran: another attempt may do better
            await self._fail(ctx, TargetBusy(f"idempotency key {k!r}: {e}"))
            return True
        if stored is None:
            return False
        if stored.error:
            err = from_code(str(stored.error.get("code", "INTERNAL")), str(stored.error.get("message", "")))
            await self._fail(ctx, err, {w.H_REPLAYED: "true", **({w.H_COST: stored.cost} if stored.cost else {})})
        else:
            h = self._result_headers(ctx, stored.content_type or ctx.content_type, stored.cost)
            h[w.H_REPLAYED] = "true"
            await self._answer(ctx, h, stored.data)
        return True

    async def _execute(self, reg: _Registered, ctx: Context) -> tuple[dict[str, str], bytes, Optional["asyncio.Future[Any]"]]:
        """Runs the handler until its deadline; returns the reply to send."""
        try:
            payload = ctx.data if reg.payload_type is bytes else convert(reg.payload_type, w.decode(ctx.content_type, ctx.data))
        except ReachError as e:
            return (*self._error(ctx, e), None)
        if reg.is_gen:
            fut: asyncio.Future[Any] = self._loop.create_task(_stream_of(ctx, reg.fn(ctx, payload)))
        elif reg.is_async:
            fut = self._loop.create_task(reg.fn(ctx, payload))
        else:
            assert self._executor is not None
            cf = self._executor.submit(contextvars.copy_context().run, reg.fn, ctx, payload)
            fut = asyncio.wrap_future(cf)
        try:
            done, _ = await asyncio.wait({fut}, timeout=max(0.0, ctx.remaining()))
        except asyncio.CancelledError:  # a hard stop: the drain gave up waiting
            fut.cancel()
            raise
        if not done:
            if reg.is_async:
                fut.cancel()  # it stops at its next await; a thread cannot be stopped and runs on
            return (*self._error(ctx, DeadlineExceeded("the task's deadline passed while it ran")), fut)
        try:
            out = fut.result()
        except ReachError as e:
            return (*self._error(ctx, e), None)
        except asyncio.CancelledError:
            return (*self._error(ctx, Cancelled("the handler was cancelled")), None)
        except Exception as e:
            log.error("handler failed agent=%s request_id=%s capability=%s", self.id, ctx.request_id,
                      ctx.capability, exc_info=e)
            return (*self._error(ctx, Internal(f"{e.__class__.__name__}: {e}")), None)
        try:
            body = out if isinstance(out, (bytes, bytearray)) else w.encode(ctx.content_type, to_wire(out, ctx.content_type == w.JSON))
        except ReachError as e:
            return (*self._error(ctx, e), None)
        headers = self._result_headers(ctx, ctx.content_type, ctx._cost_header())
        try:
            # Checked before an idempotent outcome is stored, with the load
            # report at its widest; _answer checks again what it sends.
            w.check_size({**headers, w.H_ACTIVE: str(self.max_concurrent)}, body, self.max_payload)
        except PayloadTooLarge as e:
            return (*self._error(ctx, PayloadTooLarge(f"result: {e.message}")), None)
        return headers, bytes(body), None

    def _result_headers(self, ctx: Context, ct: str, cost: str) -> dict[str, str]:
        h = {w.H_STATUS: w.FINISHED, w.H_REQUEST_ID: ctx.request_id, w.H_NODE: self.id, w.H_CONTENT_TYPE: ct}
        if cost:
            h[w.H_COST] = cost
        return h

    def _error(self, ctx: Context, e: ReachError, extra: Optional[dict[str, str]] = None) -> tuple[dict[str, str], bytes]:
        ct = w.MSGPACK if ctx.content_type == w.MSGPACK else w.JSON
        h = {w.H_STATUS: w.TIMEOUT if e.code == "TIMEOUT" else w.FAILED, w.H_REQUEST_ID: ctx.request_id,
             w.H_ERROR: e.code, w.H_CONTENT_TYPE: ct, w.H_NODE: self.id}
        cost = ctx._cost_header()
        if cost:
            h[w.H_COST] = cost
        if extra:
            h.update(extra)
        return h, w.encode(ct, {"code": e.code, "message": e.message})

    async def _settle(self, ctx: Context, key: str, headers: dict[str, str], body: bytes) -> None:
        """Records an idempotent task's outcome before its reply: a result or
        a BIZ_REJECT; after any other error the claim is given back."""
        assert self._idem is not None
        code = headers.get(w.H_ERROR, "")
        # While the store is slow or unavailable the reply waits: PROCESSING
        # after SETTLE_NOTICE, then every SETTLE_PROGRESS seconds, keeps the
        # dispatcher's per-call timeout from expiring on work that was done.
        informer = asyncio.ensure_future(_keep_informed(ctx))
        try:
            if not code:
                await self._idem.store(key, Outcome(request_id=ctx.request_id, content_type=headers[w.H_CONTENT_TYPE],
                                                    data=body, cost=headers.get(w.H_COST, "")))
            elif code == "BIZ_REJECT":
                e = w.decode(headers[w.H_CONTENT_TYPE], body)
                await self._idem.store(key, Outcome(request_id=ctx.request_id, content_type=ctx.content_type,
                                                    error={"code": code, "message": str(e.get("message", ""))},
                                                    cost=headers.get(w.H_COST, "")))
            else:
                await self._idem.release(key)
        except Exception as e:
            log.error("idempotency outcome not recorded yet, retried until the store answers "
                      "agent=%s request_id=%s key=%s error=%r", self.id, ctx.request_id, key, e)
        finally:
            informer.cancel()

    async def _fail(self, ctx: Context, e: ReachError, extra: Optional[dict[str, str]] = None) -> None:
        await self._answer(ctx, *self._error(ctx, e, extra))

    async def _answer(self, ctx: Context, headers: dict[str, str], body: bytes, free: bool = True) -> None:
        """Sends the final reply: straight to the caller when the delivery
        offers its inbox under our prefix (a FINISHED result only), else on
        the delivery's reply subject."""
        if ctx._final:
            return
        ctx._final = True
        if ctx._ack_timer is not None:
            ctx._ack_timer.cancel()
        ctx._answered = True
        await ctx._sent()
        if ctx._chunks and headers.get(w.H_STATUS) == w.FINISHED:
            headers = {**headers, w.H_CHUNKS: str(ctx._chunks)}
        if free:
            self._free(ctx)  # the slot is free before the reply leaves
        active = str(self.active)
        if (self._reply_prefix and ctx._reply_to.startswith(self._reply_prefix)
                and headers.get(w.H_STATUS) == w.FINISHED):
            direct = {**headers, w.H_ORCHESTRATION_ID: ctx.orchestration_id, w.H_ATTEMPT: str(ctx.attempt)}
            if not self.max_payload or w.message_size(direct, body) <= self.max_payload:
                notice = {w.H_STATUS: w.FINISHED, w.H_DIRECT: "1", w.H_ACTIVE: active}
                if w.H_COST in headers:
                    notice[w.H_COST] = headers[w.H_COST]
                # The result goes first: should the agent die between the two,
                # the caller has its answer and the dispatcher merely times out.
                await self._publish(ctx._reply_to, direct, body)
                await self._publish(ctx._reply, notice, b"")
                return
        reply = {**headers, w.H_ACTIVE: active}
        try:
            w.check_size(reply, body, self.max_payload)
        except PayloadTooLarge as e:  # a long rejection, say: an error rather than a lost answer
            reply, body = self._error(ctx, PayloadTooLarge(f"reply: {e.message}"))
            reply[w.H_ACTIVE] = active
        await self._publish(ctx._reply, reply, body)

    def _free(self, ctx: Context) -> None:
        """Gives back the slot of ctx, once."""
        if ctx._holds_slot:
            ctx._holds_slot = False
            self.active -= 1


async def _stream_of(ctx: Context, gen: Any) -> Any:
    """Runs an async-generator handler: each value it yields is sent as a
    chunk (ctx.send); the result is them all — str and bytes joined, any
    other values as a list."""
    items: list[Any] = []
    async for item in gen:
        await ctx.send(item)
        items.append(item)
    if items and all(isinstance(i, str) for i in items):
        return "".join(items)
    if items and all(isinstance(i, (bytes, bytearray)) for i in items):
        return b"".join(items)
    return items


SETTLE_NOTICE = 0.25  # seconds before the first PROCESSING while an outcome is stored
SETTLE_PROGRESS = 1.0  # seconds between the next ones


async def _keep_informed(ctx: Context) -> None:
    """Sends PROCESSING for ctx after SETTLE_NOTICE, then every
    SETTLE_PROGRESS seconds, until cancelled."""
    await asyncio.sleep(SETTLE_NOTICE)
    while True:
        ctx._progress()
        await asyncio.sleep(SETTLE_PROGRESS)
