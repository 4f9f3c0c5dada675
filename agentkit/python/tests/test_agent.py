"""The agent against a real stack: registration, heartbeats, answers, slots, drain."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from dataclasses import dataclass

import msgpack
import pydantic
import pytest

from agentreach import (Agent, BadRequest, BizReject, Busy, Context, Internal, InvalidConfig, PayloadTooLarge, Reject,
                        TargetBusy)
from conftest import BINARY, HEARTBEAT, MAX_PAYLOAD, WAIT, Direct, header_bytes, poll, routed, running, unique


async def record_of(nc, agent_id):
    kv = await nc.jetstream().key_value("REACH_AGENTS")
    try:
        e = await kv.get(agent_id)
    except Exception:
        return None
    return json.loads(e.value)


async def test_register_and_heartbeat(nc, stack):
    cap = unique("reg.echo")
    agent = Agent(stack.url, type="regtest", max_concurrent=3, weight=250, version="2.0.0")

    @agent.handler(cap)
    async def echo(ctx, payload):
        return payload

    async with running(agent):
        rec = await record_of(nc, agent.id)
        assert rec == {"id": agent.id, "type": "regtest", "capabilities": [cap], "max_concurrent": 3, "weight": 250,
                       "active": 0, "status": "ready", "timeout_hint_ms": 0, "version": "2.0.0",
                       "heartbeat_ms": int(HEARTBEAT * 1000), "incarnation": agent.incarnation}
        assert len(agent.incarnation) == 16
        # Heartbeats: the server's timestamps of successive puts, one heartbeat apart.
        kv = await nc.jetstream().key_value("REACH_AGENTS")
        watcher = await kv.watch(agent.id)
        stamps = []
        try:
            while len(stamps) < 6:
                e = await watcher.updates(timeout=5 * HEARTBEAT)
                if e is not None:
                    stamps.append(e.created)
        finally:
            await watcher.stop()
        gaps = [(b - a).total_seconds() for a, b in zip(stamps[1:], stamps[2:])]  # the first may be the initial value
        on_time = [0.5 * HEARTBEAT <= g <= 1.5 * HEARTBEAT for g in gaps]
        assert any(x and y for x, y in zip(on_time, on_time[1:])), f"heartbeat gaps {gaps}, want {HEARTBEAT}s"
    assert await record_of(nc, agent.id) is None, "the record is deleted after the drain"


async def test_call_json_and_msgpack(client, json_client, stack):
    cap = unique("call.echo")
    agent = Agent(stack.url, type="calltest")

    @agent.handler(cap)
    async def echo(ctx: Context, payload):
        return {"got": payload, "ct": ctx.content_type, "attempt": ctx.attempt}

    async with running(agent):
        for c, ct in ((client, "application/msgpack"), (json_client, "application/json")):
            res = await routed(lambda: c.call(cap, {"text": "hi", "n": [1, 2.5, None]}, timeout=10))
            assert res.content_type == ct
            assert res.value == {"got": {"text": "hi", "n": [1, 2.5, None]}, "ct": ct, "attempt": 1}
            assert (res.status, res.node, res.attempt) == ("FINISHED", agent.id, 1)
            assert res.request_id and res.orchestration_id == res.request_id
        res = await client.call(cap, {"blob": b"\x00\xff"}, timeout=10)  # bytes travel in msgpack
        assert res.value["got"] == {"blob": b"\x00\xff"}


@dataclass
class Order:
    sku: str
    qty: int = 1


@dataclass
class Stock:
    sku: str
    stock: int


class Quote(pydantic.BaseModel):
    sku: str
    price: float


async def test_typed_payloads(json_client, client, stack):
    cap = unique("typed")
    agent = Agent(stack.url, type="typedtest")

    @agent.handler(f"{cap}.order")
    async def order(ctx, o: Order) -> Stock:
        return Stock(sku=o.sku, stock=10 - o.qty)

    @agent.handler(f"{cap}.quote")
    async def quote(ctx, q: Quote) -> Quote:
        return Quote(sku=q.sku, price=q.price * 2)

    async with running(agent):
        res = await routed(lambda: json_client.call(f"{cap}.order", {"sku": "a-1", "qty": 3}, timeout=10))
        assert res.decode(Stock) == Stock(sku="a-1", stock=7)
        res = await client.call(f"{cap}.quote", {"sku": "b", "price": 1.25}, timeout=10)
        assert res.decode(Quote) == Quote(sku="b", price=2.5)
        with pytest.raises(BadRequest, match="payload field 'qty' must be an integer, got string"):
            await json_client.call(f"{cap}.order", {"sku": "a-1", "qty": "three"}, timeout=10)
        with pytest.raises(BadRequest, match="payload field 'sku' is required"):
            await json_client.call(f"{cap}.order", {"qty": 1}, timeout=10)
        with pytest.raises(BadRequest, match=r"payload\.price"):
            await client.call(f"{cap}.quote", {"sku": "b", "price": "cheap"}, timeout=10)
        # The agent keeps serving.
        assert (await json_client.call(f"{cap}.order", {"sku": "z"}, timeout=10)).value == {"sku": "z", "stock": 9}


async def test_errors_from_handlers(client, json_client, stack):
    cap = unique("errs")
    agent = Agent(stack.url, type="errtest")

    @agent.handler(f"{cap}.reject")
    async def reject(ctx, p):
        raise Reject("out of stock")

    @agent.handler(f"{cap}.bad")
    async def bad(ctx, p):
        raise BadRequest("sku is malformed")

    @agent.handler(f"{cap}.busy")
    async def busy(ctx, p):
        raise Busy("come back later")

    @agent.handler(f"{cap}.boom")
    async def boom(ctx, p):
        raise ValueError("division by zero, in effect")

    @agent.handler(f"{cap}.ok")
    async def ok(ctx, p):
        return "fine"

    async with running(agent):
        for c in (client, json_client):
            with pytest.raises(BizReject, match="out of stock") as e:
                await routed(lambda: c.call(f"{cap}.reject", {}, timeout=10))
            assert e.value.result.attempt == 1 and e.value.result.node == agent.id  # never retried
            with pytest.raises(BadRequest, match="sku is malformed") as e:
                await c.call(f"{cap}.bad", {}, timeout=10)
            assert e.value.result.attempt == 1
            with pytest.raises(Internal, match="ValueError: division by zero, in effect") as e:
                await c.call(f"{cap}.boom", {}, timeout=10)
            assert e.value.result.attempt == 1 and not e.value.in_doubt
        with pytest.raises(TargetBusy) as e:  # retried elsewhere, then answered as it is
            await client.call(f"{cap}.busy", {}, timeout=20)
        assert e.value.result.attempt == 3
        assert (await client.call(f"{cap}.ok", None, timeout=10)).value == "fine"  # still serving


@dataclass
class Millis:
    ms: int


async def test_bad_input_direct(nc, stack):
    cap = unique("bad")
    agent = Agent(stack.url, type="badtest")

    @agent.handler(cap)
    async def slow(ctx, p: Millis):
        return {"ms": p.ms}

    async with running(agent):
        d = Direct(nc, agent.id)
        for ct, body in (("application/json", b'{"ms":'), ("application/msgpack", b"\xc1"),
                         ("application/msgpack", b"\x93\x01"), ("text/plain", b"hi")):
            m = await (await d.deliver(cap, body, ct)).final()
            assert (m.headers["Reach-Status"], m.headers["Reach-Error"]) == ("FAILED", "BAD_REQUEST"), (ct, body)
            assert m.headers["Reach-Node"] == agent.id
            want_ct = "application/msgpack" if ct == "application/msgpack" else "application/json"
            assert m.headers["Content-Type"] == want_ct
            err = msgpack.unpackb(m.data) if want_ct.endswith("msgpack") else json.loads(m.data)
            assert err["code"] == "BAD_REQUEST" and err["message"]
        m = await (await d.deliver(cap, msgpack.packb({"ms": 5}), "application/msgpack")).final()
        assert m.headers["Reach-Status"] == "FINISHED" and msgpack.unpackb(m.data) == {"ms": 5}
        m = await (await d.deliver(unique("absent"), b"{}")).final(timeout=1)
        assert m.headers["Reach-Error"] == "NO_AGENT"


async def test_payload_too_large(client, stack):
    cap = unique("big")
    agent = Agent(stack.url, type="bigtest")

    @agent.handler(cap)
    async def big(ctx, n: int) -> bytes:
        return b"x" * n

    async with running(agent):
        with pytest.raises(PayloadTooLarge, match=f"max_payload of {MAX_PAYLOAD}") as e:
            await routed(lambda: client.call(cap, MAX_PAYLOAD, timeout=10))
        assert e.value.result.node == agent.id
        # Just below the limit, with the headers counted, it goes through.
        assert len((await client.call(cap, MAX_PAYLOAD - 1024, timeout=10)).data) == MAX_PAYLOAD - 1024


async def test_result_that_fits_only_without_the_load_report(client, stack):
    """The result's check counts the load report (Reach-Active) the reply
    carries: a result that fits only without it is PAYLOAD_TOO_LARGE naming
    the limit, at once, not a reply lost until the caller's timeout."""
    cap = unique("edge")
    agent = Agent(stack.url, type="edgetest")

    @agent.handler(cap)
    async def sized(ctx, n: int) -> bytes:
        return b"x" * n

    async with running(agent):
        with pytest.raises(PayloadTooLarge) as e:
            await routed(lambda: client.call(cap, MAX_PAYLOAD - 8, timeout=WAIT))
        hdr = header_bytes(e.value, MAX_PAYLOAD - 8, "result: ")
        assert hdr > len("Reach-Active: 8\r\n")
        with pytest.raises(PayloadTooLarge) as e:
            await client.call(cap, MAX_PAYLOAD - hdr + 1, timeout=WAIT)
        assert header_bytes(e.value, MAX_PAYLOAD - hdr + 1, "result: ") == hdr and e.value.result.node == agent.id


async def test_long_rejection_is_payload_too_large(client, stack):
    """An error reply is checked where it is sent too: a rejection whose
    message makes the reply exceed max_payload, by its body or by its
    headers, is PAYLOAD_TOO_LARGE from the agent rather than an answer lost
    (the server closes the connection of a publish it refuses) and the agent
    stays connected."""
    cap = unique("longreject")
    agent = Agent(stack.url, type="longrejecttest")

    @agent.handler(cap)
    async def reject(ctx, n: int):
        raise Reject("x" * n)

    async with running(agent):
        for n in (MAX_PAYLOAD, MAX_PAYLOAD - 64):
            with pytest.raises(PayloadTooLarge) as e:
                await routed(lambda: client.call(cap, n, timeout=WAIT))
            assert e.value.result.node == agent.id
            header_bytes(e.value, len(msgpack.packb({"code": "BIZ_REJECT", "message": "x" * n})), "reply: ")
        with pytest.raises(BizReject, match="^BIZ_REJECT: x$"):
            await client.call(cap, 1, timeout=WAIT)


async def test_max_concurrent(nc, stack):
    cap = unique("slots")
    agent = Agent(stack.url, type="slottest", max_concurrent=2)
    release = asyncio.Event()
    started = 0

    @agent.handler(cap)
    async def hold(ctx, p):
        nonlocal started
        started += 1
        await release.wait()
        return {}

    async with running(agent):
        d = Direct(nc, agent.id)
        first = [await d.deliver(cap, b"{}") for _ in range(2)]
        await poll(lambda: asyncio.sleep(0, started == 2), "both slots taken")
        # A result ready within ACK_DELAY replaces the ACKED (docs/protocol.md):
        # these two hold their slots, so each is ACKED once ACK_DELAY is over.
        await poll(lambda: asyncio.sleep(0, all(r.msgs for r in first)), "both deliveries ACKED")
        third = await (await d.deliver(cap, b"{}")).final(timeout=1)
        assert (third.headers["Reach-Status"], third.headers["Reach-Error"]) == ("FAILED", "TARGET_BUSY")
        assert agent.active == 2
        release.set()
        for r in first:
            m = await r.final()
            assert m.headers["Reach-Status"] == "FINISHED"
            assert r.statuses() == ["ACKED", "FINISHED"] and r.msgs[0].headers["Reach-Active"] in ("1", "2")
        assert agent.active == 0


async def test_sync_handler_runs_on_a_thread(json_client, stack):
    cap = unique("sync")
    agent = Agent(stack.url, type="synctest", max_concurrent=2)

    @agent.handler(cap)
    def spin(ctx, n: int):  # plain def: blocking work, off the event loop
        ctx.progress()
        return sum(range(n))

    async with running(agent):
        assert (await routed(lambda: json_client.call(cap, 1000, timeout=10))).value == sum(range(1000))


async def test_drain_loses_no_result(json_client, nc, stack):
    cap = unique("drain")
    agent = Agent(stack.url, type="draintest", max_concurrent=4)
    inside = 0

    @agent.handler(cap)
    async def slow(ctx, p):
        nonlocal inside
        inside += 1
        await asyncio.sleep(0.5)
        return {"done": p}

    await agent.start()
    kv = await nc.jetstream().key_value("REACH_AGENTS")
    watcher = await kv.watch(agent.id)
    calls = [asyncio.ensure_future(routed(lambda i=i: json_client.call(cap, i, timeout=10))) for i in range(3)]
    await poll(lambda: asyncio.sleep(0, inside == 3), "three tasks running")
    await agent.drain()
    assert sorted(r.value["done"] for r in await asyncio.gather(*calls)) == [0, 1, 2]
    ops = []
    while True:
        e = await watcher.updates(timeout=5)
        if e is None:
            continue
        ops.append("delete" if e.operation == "DEL" else json.loads(e.value)["status"] if e.value else e.operation)
        if e.operation:
            break
    await watcher.stop()
    assert "draining" in ops and ops[-1] == "delete", ops
    assert ops.index("draining") < len(ops) - 1
    await agent.drain()  # a second drain is harmless


async def test_invalid_configuration():
    def local_types():
        @dataclass
        class Local:
            x: int

        async def handler(ctx, p: Local):
            return p

        return handler

    with pytest.raises(InvalidConfig, match="type: 'Bad Type'"):
        Agent("nats://127.0.0.1:1", type="Bad Type")
    with pytest.raises(InvalidConfig, match="max_concurrent"):
        Agent("nats://127.0.0.1:1", type="ok", max_concurrent=0)
    with pytest.raises(InvalidConfig, match="weight"):
        Agent("nats://127.0.0.1:1", type="ok", weight=0)
    agent = Agent("nats://127.0.0.1:1", type="ok")
    with pytest.raises(InvalidConfig, match="capability: 'Inventory.Query'"):
        agent.handle("Inventory.Query", lambda ctx, p: p)
    with pytest.raises(InvalidConfig, match="parameter 'p' cannot be resolved"):
        agent.handle("ok.local", local_types())
    with pytest.raises(InvalidConfig, match="no capability handlers"):
        await agent.start()


@pytest.mark.parametrize("decl, field", [
    ({"capabilities": [{"name": "decl.a", "timeout_ms": -1}]}, "declaration.capabilities[0].timeout_ms"),
    ({"capabilities": [{"name": "decl.b"}]}, "declaration.capabilities[0].name"),
    ({"capabilities": [{"name": "decl.a", "mode": "delete"}]}, "declaration.capabilities[0].mode"),
    ({"capabilities": [{"name": "decl.a", "cost": -1}]}, "declaration.capabilities[0].cost"),
    ({"capabilities": [{"name": "decl.a", "input_schema": "object"}]}, "declaration.capabilities[0].input_schema"),
    ({"capabilities": []}, "declaration.capabilities"),
    ({"capabilities": [{"name": "decl.a"}], "labels": {"engine": "postgres"}}, "declaration.labels.engine"),
    ({"capabilities": [{"name": "decl.a"}], "labels": {"Engine": ["pg"]}}, "declaration.labels.Engine"),
    ({"capabilities": [{"name": "decl.a"}], "limits": {"rows": "many"}}, "declaration.limits.rows"),
    ({"capabilities": [{"name": "decl.a"}], "permissions": ["read"], "refuses": ["read"]}, "declaration.refuses[0]"),
    ({"capabilities": [{"name": "decl.a"}], "depends_on": ["ext.db", "ext.db"]}, "declaration.depends_on[1]"),
    ({"capabilities": [{"name": "decl.a"}], "type": "other"}, "declaration.type"),
    ({"capabilities": [{"name": "decl.a"}], "colour": "blue"}, "declaration.colour"),
])
async def test_declaration_refused_at_start(stack, nc, decl, field):
    agent = Agent(stack.url, type="decltest", declaration=decl)
    agent.handle("decl.a", lambda ctx, p: p)
    with pytest.raises(InvalidConfig, match=field.replace("[", r"\[").replace("]", r"\]")):
        await agent.start()
    assert await record_of(nc, agent.id) is None, "nothing is registered"
    if field not in ("declaration.capabilities[0].name", "declaration.type"):  # the Python-only rules
        assert go_validate({"type": "decltest", **decl}).returncode != 0, "the Go model refuses it too"


def go_validate(decl):
    """Runs the Go model's check (agentreach caps validate) on a declaration."""
    return subprocess.run([str(BINARY), "caps", "validate", "-"], input=json.dumps(decl),
                          capture_output=True, text=True, timeout=30)


async def test_declaration_lists_every_problem():
    agent = Agent("nats://127.0.0.1:1", type="decltest",
                  declaration={"capabilities": [{"name": "decl.a", "timeout_ms": -1}], "limits": {"x": None}})
    agent.handle("decl.a", lambda ctx, p: p)
    with pytest.raises(InvalidConfig) as e:
        await agent.start()
    assert str(e.value) == ("declaration.capabilities[0].timeout_ms: must not be negative, got -1; "
                            "declaration.limits.x: must be a finite number, got None")


async def test_declaration_written_to_caps(stack, nc):
    decl = {"version": "1.0.0", "description": "inventory", "labels": {"region": ["eu-west"]},
            "capabilities": [{"name": "decl.query", "mode": "read", "idempotent": True, "timeout_ms": 2000}]}
    agent = Agent(stack.url, type="declok", declaration=decl)
    agent.handle("decl.query", lambda ctx, p: p)
    async with running(agent):
        e = await (await nc.jetstream().key_value("REACH_CAPS")).get("declok")
        assert json.loads(e.value) == {**decl, "type": "declok"}
        out = go_validate(json.loads(e.value))
        assert out.returncode == 0, f"the Go model accepts it: {out.stderr}"


async def test_cpu_bound_async_handlers_keep_heartbeats(nc, stack, json_client):
    """Every slot spins the event loop itself: the heartbeat's own thread and
    connection keep the record on time all the same."""
    cap = unique("cpu")
    agent = Agent(stack.url, type="cputest", max_concurrent=2)

    @agent.handler(cap)
    async def spin(ctx, seconds: float):
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # never awaits: holds the loop
            pass
        return "spun"

    async with running(agent):
        kv = await nc.jetstream().key_value("REACH_AGENTS")
        before = agent._hb.puts
        calls = [asyncio.ensure_future(routed(lambda: json_client.call(cap, 1.5 * HEARTBEAT, timeout=20)))
                 for _ in range(2)]
        done, _ = await asyncio.wait(calls, timeout=15)
        assert all(c.result().value == "spun" for c in done) and len(done) == 2
        # Two slots of 1.5 heartbeats each held the loop for about 3 heartbeats.
        assert agent._hb.puts - before >= 2, "heartbeats went on while the loop was held"
        assert agent._hb.failures == 0
        await kv.get(agent.id)  # never expired


async def test_deadline_stops_the_handler(nc, stack):
    cap = unique("late")
    agent = Agent(stack.url, type="latetest", max_concurrent=2)
    release = threading.Event()

    @agent.handler(f"{cap}.async")
    async def slow(ctx, p):
        await asyncio.sleep(30)

    @agent.handler(f"{cap}.thread")
    def blocking(ctx, p):
        release.wait(30)
        return "late"

    async with running(agent):
        d = Direct(nc, agent.id)
        soon = {"Reach-Deadline": str(int((time.time() + 0.3) * 1000))}
        m = await (await d.deliver(f"{cap}.async", b"{}", extra=soon)).final()
        assert m.headers["Reach-Error"] == "DEADLINE_EXCEEDED"
        await poll(lambda: asyncio.sleep(0, agent.active == 0), "the async handler's slot given back")
        soon = {"Reach-Deadline": str(int((time.time() + 0.3) * 1000))}
        m = await (await d.deliver(f"{cap}.thread", b"{}", extra=soon)).final()
        assert m.headers["Reach-Error"] == "DEADLINE_EXCEEDED"
        assert agent.active == 1, "a thread past its deadline still holds its slot"
        release.set()
        await poll(lambda: asyncio.sleep(0, agent.active == 0), "the thread's slot given back")
        past = {"Reach-Deadline": str(int((time.time() - 1) * 1000))}
        m = await (await d.deliver(f"{cap}.async", b"{}", extra=past)).final()
        assert m.headers["Reach-Error"] == "DEADLINE_EXCEEDED"
