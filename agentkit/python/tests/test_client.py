"""The client against a real stack, and idempotency, cancellation, chains."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import time

from typing import Any

import msgpack
import pytest

from agentreach import (ERRORS, Agent, BadRequest, Branch, Cancelled, Client, Context, DeadlineExceeded, Incomplete,
                        Internal, NoAgent, NoResult, Reject, idempotency_bucket_key)
from agentreach._wire import result_source
from conftest import REPO, WAIT, Direct, fills_max_payload, poll, python, routed, running, unique


def test_error_classes_match_the_wire_codes():
    go = (REPO / "streams" / "errors.go").read_text()
    codes = set(re.findall(r'^\s*Code\w+\s+Code = "([A-Z_]+)"', go, re.M))
    assert len(codes) >= 14
    assert set(ERRORS) == codes
    for code, cls in ERRORS.items():
        assert cls.code == code and cls("x").code == code


def test_idempotency_bucket_key():
    assert idempotency_bucket_key("orders.write", "alice", "order-7_A=") == "orders.write.alice.order-7_A="
    assert idempotency_bucket_key("orders.write", "bob", "order-7_A=") == "orders.write.bob.order-7_A="
    assert idempotency_bucket_key("orders.write", "", "k") == "orders.write.=.k"  # no Reach-Source
    for key in ("has space", "a.b", "", "x" * 129, "ключ"):
        digest = hashlib.sha256(key.encode()).digest()[:16].hex()
        assert idempotency_bucket_key("orders.write", "alice", key) == f"orders.write.alice.sha256-{digest}"
        if key:
            assert idempotency_bucket_key("orders.write", key, "k") == f"orders.write.sha256-{digest}.k"
    # The keys streams.TestIdempotencyKey expects of Go.
    assert idempotency_bucket_key("math.add", "", "order-42") == "math.add.=.order-42"
    assert (idempotency_bucket_key("pay", "alice", "a key/with spaces")
            == "pay.alice.sha256-72d91f078b92fc1b995051897d7a61c5")
    assert idempotency_bucket_key("pay", "not.a.token", "k") == "pay.sha256-7d9e2832322bd04ea956768d2068aa87.k"


async def test_no_agent_and_bad_capability(client):
    with pytest.raises(NoAgent):
        await client.call(unique("nobody.home"), {}, timeout=10)
    with pytest.raises(Exception, match="capability"):
        await client.call("Not A Capability", {}, timeout=10)


async def test_idempotent_execution(nc, client, stack):
    cap = unique("idem.write")
    agent = Agent(stack.url, type="idemtest", max_concurrent=4)
    executions: dict[str, int] = {}

    @agent.handler(cap)
    async def write(ctx: Context, p):
        executions[ctx.idempotency_key] = executions.get(ctx.idempotency_key, 0) + 1
        await asyncio.sleep(0.2)
        if p == "reject":
            raise Reject("refused once and for all")
        ctx.set_cost(0.25)
        return {"n": executions[ctx.idempotency_key]}

    async with running(agent):
        first = await routed(lambda: client.call(cap, "x", idempotency_key="k-1", timeout=10))
        again = await client.call(cap, "x", idempotency_key="k-1", timeout=10)
        assert first.value == again.value == {"n": 1}
        assert not first.replayed and again.replayed and again.cost == 0.25
        kv = await nc.jetstream().key_value("REACH_IDEMPOTENCY")
        rec = msgpack.unpackb((await kv.get(f"{cap}.=.k-1")).value)  # the client sets no Reach-Source
        assert set(rec) == {"state", "owner", "incarnation", "request_id", "content_type", "data", "error", "cost"}
        assert (rec["state"], rec["owner"], rec["request_id"]) == ("done", agent.id, first.request_id)
        assert rec["incarnation"] == agent.incarnation
        assert (rec["content_type"], rec["data"], rec["cost"]) == ("application/msgpack", first.data, "0.25")
        # A key that is no KV token is hashed; two at once execute it once.
        both = await asyncio.gather(*(client.call(cap, "y", idempotency_key="a key/with spaces", timeout=10)
                                      for _ in range(2)))
        assert [b.value for b in both] == [{"n": 1}, {"n": 1}] and executions["a key/with spaces"] == 1
        await kv.get(idempotency_bucket_key(cap, "", "a key/with spaces"))
        # A stored rejection is replayed as a rejection.
        for _ in range(2):
            with pytest.raises(Reject, match="refused once and for all"):
                await client.call(cap, "reject", idempotency_key="k-rej", timeout=10)
        assert executions["k-rej"] == 1
        # A claim whose owner is gone is in doubt: answered, never executed.
        claim = msgpack.packb({"state": "pending", "owner": "ghost-1", "request_id": "r-ghost"})
        await kv.create(f"{cap}.=.k-ghost", claim)
        with pytest.raises(Internal) as e:
            await client.call(cap, "z", idempotency_key="k-ghost", timeout=10)
        assert e.value.in_doubt and "k-ghost" not in executions
        # A claim of an earlier run of this very instance (it restarted under
        # its id) is in doubt too, though the instance is alive.
        claim = msgpack.packb({"state": "pending", "owner": agent.id, "incarnation": "an-earlier-run",
                               "request_id": "r-old"})
        await kv.create(f"{cap}.=.k-old", claim)
        with pytest.raises(Internal) as e:
            await client.call(cap, "z", idempotency_key="k-old", timeout=10)
        assert e.value.in_doubt and "k-old" not in executions
        # So is one of another live instance that restarted since: its
        # record names another incarnation than the claim.
        other = Agent(stack.url, type="idemtest-other")

        @other.handler(unique("idem.other"))
        async def nothing(ctx: Context, p: Any) -> None:
            return None

        async with running(other):
            claim = msgpack.packb({"state": "pending", "owner": other.id, "incarnation": "an-earlier-run",
                                   "request_id": "r-other"})
            await kv.create(f"{cap}.=.k-other", claim)
            with pytest.raises(Internal) as e:
                await client.call(cap, "z", idempotency_key="k-other", timeout=10)
            assert e.value.in_doubt and "k-other" not in executions
        # A claim create stored although its answer was lost is read back
        # and taken as the task's: executed once, not in doubt.
        idem = agent._idem
        assert idem is not None
        real = idem._kv

        class LostAnswer:
            lost = 0

            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            async def create(self, key: str, value: bytes, **kw: Any) -> Any:
                rev = await real.create(key, value, **kw)
                if LostAnswer.lost == 0:
                    LostAnswer.lost = 1
                    raise asyncio.TimeoutError()
                return rev

        idem._kv = LostAnswer()
        try:
            lost = await client.call(cap, "x", idempotency_key="k-lost", timeout=10)
        finally:
            idem._kv = real
        assert LostAnswer.lost == 1 and lost.value == {"n": 1} and executions["k-lost"] == 1 and not lost.replayed
        rec = msgpack.unpackb((await kv.get(f"{cap}.=.k-lost")).value)
        assert rec["state"] == "done" and rec["incarnation"] == agent.incarnation


async def test_cancellation_reaches_ctx(client, stack):
    cap = unique("cancel.wait")
    agent = Agent(stack.url, type="canceltest")
    started, seen = asyncio.Event(), asyncio.Event()

    @agent.handler(cap)
    async def wait(ctx: Context, p):
        started.set()
        await asyncio.wait_for(ctx.cancelled.wait(), 20)
        seen.set()
        raise Cancelled("stopped on request")

    async with running(agent):
        call = asyncio.ensure_future(routed(lambda: client.call(cap, {}, timeout=30)))
        await asyncio.wait_for(started.wait(), 10)
        call.cancel()  # the client publishes on reach.cancel; the dispatcher sends a CANCEL
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(seen.wait(), 10)
        # A caller that stops waiting cancels too (here before the task's own deadline).
        started.clear()
        seen.clear()
        with pytest.raises(DeadlineExceeded):
            await client.call(cap, {}, timeout=0.5, deadline=time.time() + 30)
        await asyncio.wait_for(seen.wait(), 10)


async def test_chain_carries_ids_and_deadline(json_client, stack):
    cap = unique("chain")
    agent = Agent(stack.url, type="chaintest")

    @agent.handler(f"{cap}.inner")
    async def inner(ctx: Context, p):
        return {"orch": ctx.orchestration_id, "hops": ctx.hops, "source": ctx.source, "trace": ctx.traceparent,
                "deadline": ctx.deadline, "visits": ctx.visits}

    @agent.handler(f"{cap}.outer")
    async def outer(ctx: Context, p):
        res = await ctx.call(f"{cap}.inner", {})
        return {"inner": res.value, "orch": ctx.orchestration_id, "hops": ctx.hops, "deadline": ctx.deadline}

    async with running(agent):
        trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        res = await routed(lambda: json_client.call(f"{cap}.outer", {}, timeout=20, headers={"traceparent": trace}))
        out = res.value
        assert out["inner"]["orch"] == out["orch"] == res.orchestration_id
        assert out["inner"]["hops"] > out["hops"] >= 1
        assert out["inner"]["source"] == agent.id and out["inner"]["trace"] == trace
        assert out["inner"]["deadline"] <= out["deadline"] + 0.001
        assert agent.id in out["inner"]["visits"]


async def test_broadcast_and_fanout(client, json_client, stack):
    cap = unique("gather")
    agents = [Agent(stack.url, type="gathertest") for _ in range(2)]
    for a in agents:
        a.handle(f"{cap}.echo", lambda ctx, p, a=a: {"from": a.id, "p": p})

        async def reject(ctx, p):
            raise Reject("never")

        a.handle(f"{cap}.reject", reject)
    async with running(agents[0]), running(agents[1]):
        for a in agents:  # a broadcast goes to the instances routable when it arrives
            await routed(lambda: client.call(f"{cap}.echo", 0, agent=a.id, timeout=10))
        for c in (client, json_client):
            g = await c.broadcast(f"{cap}.echo", {"x": 1}, timeout=10)
            assert (g.expected, g.answered, g.succeeded, g.complete) == (2, 2, 2, True)
            assert sorted(r.name for r in g.replies) == sorted(a.id for a in agents)
            assert {r.value["from"] for r in g.replies} == {a.id for a in agents}
            g = await c.fanout([Branch("one", f"{cap}.echo", {"n": 1}), Branch("two", f"{cap}.echo", {"n": 2})],
                               mode="all", timeout=10)
            assert g.complete and g.by_name["one"].value["p"] == {"n": 1} and g.by_name["two"].value["p"] == {"n": 2}
            with pytest.raises(Incomplete) as e:
                await c.fanout([Branch("ok", f"{cap}.echo", 1), Branch("no", f"{cap}.reject", 1)], mode="all",
                               timeout=10)
            g = e.value.gathered
            assert (g.expected, g.answered, g.succeeded, g.complete) == (2, 2, 1, False)
            with pytest.raises(Reject, match="never"):
                g.by_name["no"].decode()
            g = await c.fanout([{"name": "ok", "capability": f"{cap}.echo", "payload": 1},
                                {"name": "no", "capability": f"{cap}.reject"}], quorum=1, timeout=10)
            assert g.complete and g.succeeded == 1


async def test_submit_result_wait(client, stack):
    cap = unique("durable")
    agent = Agent(stack.url, type="durabletest")

    @agent.handler(cap)
    async def double(ctx, n: int):
        return n * 2

    async with running(agent):
        rid = await client.submit(cap, 21)
        res = await client.wait(rid, timeout=20)
        assert res.value == 42 and res.request_id == rid
        # wait hears the outcome as it is published; result reads it from
        # REACH_RESULTS, which stores it a moment later.
        assert (await poll(lambda: recorded(client, rid), "the outcome recorded")).value == 42
        with pytest.raises(NoResult):
            await client.result("no-such-request")
        # Watching from before the outcome is recorded finds it too.
        rid = await client.submit(cap, 1, request_id=f"fixed-{time.monotonic_ns()}")
        assert (await client.wait(rid, timeout=20)).value == 2


async def test_results_are_per_caller(nc, stack):
    """A durable result is on reach.result.<source>.<request-id>: each caller
    reads its own; another caller's task under the same request id is a task
    of its own, and the same caller's resubmission is deduplicated."""
    cap = unique("percaller")
    agent = Agent(stack.url, type="percallertest")
    runs = 0

    @agent.handler(cap)
    async def echo(ctx, v: str):
        nonlocal runs
        runs += 1
        return v

    alice, bob, anonymous = Client(nc, source="alice"), Client(nc, source="bob"), Client(nc)
    rid = f"shared-{time.monotonic_ns()}"
    async with running(agent):
        assert (await alice.wait(await alice.submit(cap, "alice's", request_id=rid), timeout=20)).value == "alice's"
        assert (await poll(lambda: recorded(alice, rid), "alice's outcome recorded")).value == "alice's"
        for other in (bob, anonymous):  # the same id under another caller: no result of theirs
            with pytest.raises(NoResult):
                await other.result(rid)
        await alice.submit(cap, "again", request_id=rid)  # deduplicated: alice's task is submitted once
        assert (await bob.wait(await bob.submit(cap, "bob's", request_id=rid), timeout=20)).value == "bob's"
        assert (await poll(lambda: recorded(bob, rid), "bob's outcome recorded")).value == "bob's"
        assert (await alice.result(rid)).value == "alice's"
        assert runs == 2
        # Without a source, results are under "_".
        anon = await anonymous.submit(cap, "nobody's")
        assert (await anonymous.wait(anon, timeout=20)).value == "nobody's"
        # wait saw the result as it was published; the stream stores it a moment
        # later (until then a direct get answers 404 with no data), as above.
        direct = f"$JS.API.DIRECT.GET.REACH_RESULTS.reach.result._.{anon}"
        got = await poll(lambda: stored(nc, direct), "the anonymous result stored")
        assert got == msgpack.packb("nobody's")
    with pytest.raises(BadRequest):
        await Client(nc, source="a.b").submit(cap, 1)


def test_result_source():
    assert result_source("") == "_" and result_source("alice") == "alice"
    for bad in ("_", "a.b", "*", ">", "-x"):
        with pytest.raises(ValueError):
            result_source(bad)


async def stored(nc, direct_get):
    """Returns the data a direct get answers, None while it answers 404."""
    got = await nc.request(direct_get, b"", timeout=WAIT)
    return got.data if got.headers is None or got.headers.get("Status") != "404" else None


async def recorded(client, rid):
    try:
        return await client.result(rid)
    except NoResult:
        return None


async def test_cli_call(stack, json_client):
    cap = unique("cli.echo")
    agent = Agent(stack.url, type="clitest")
    agent.handle(cap, lambda ctx, p: {"echo": p})
    async with running(agent):
        await routed(lambda: json_client.call(cap, {}, timeout=10))
        out = await asyncio.to_thread(subprocess.run, [python(), "-m", "agentreach", "call", cap, '{"a": 1}',
                                                       "--server", stack.url], capture_output=True, text=True,
                                      timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"echo": {"a": 1}}
        out = await asyncio.to_thread(subprocess.run, [python(), "-m", "agentreach", "call", unique("nobody"), "{}",
                                                       "--server", stack.url], capture_output=True, text=True,
                                      timeout=60)
        assert out.returncode == 1 and json.loads(out.stderr)["code"] == "NO_AGENT"
        out = await asyncio.to_thread(subprocess.run, [python(), "-m", "agentreach", "call", cap, "{oops",
                                                       "--server", stack.url], capture_output=True, text=True,
                                      timeout=60)
        assert out.returncode == 2 and "payload" in out.stderr


async def test_direct_delivery_with_cancel_for_unknown(nc, stack):
    """A CANCEL for a delivery the agent never had is ignored; it keeps serving."""
    cap = unique("ign")
    agent = Agent(stack.url, type="igntest")
    agent.handle(cap, lambda ctx, p: p)
    async with running(agent):
        await nc.publish(f"reach.agent.{agent.id}", b"", headers={"Reach-Status": "CANCEL",
                                                                  "Reach-Delivery": "_INBOX.nobody",
                                                                  "Reach-Request-Id": "r-x"})
        m = await (await Direct(nc, agent.id).deliver(cap, b'"still here"')).final()
        assert m.headers["Reach-Status"] == "FINISHED" and m.data == b'"still here"'


async def test_headers_count_against_max_payload_where_sent(stack):
    """A body that fits but not with the headers the client adds on its way
    (Reach-Deadline on a call without timeout, Nats-Msg-Id on submit) is
    PAYLOAD_TOO_LARGE before anything is sent; one that fills max_payload
    exactly, headers counted as sent, is sent."""
    c = await Client.connect(stack.url)
    try:
        cap = unique("sized")

        async def submit(body: bytes) -> None:
            assert await c.submit(cap, body)  # stored

        async def call(body: bytes) -> None:
            with pytest.raises(NoAgent):  # the dispatcher answers: nobody serves cap
                await asyncio.wait_for(c.call(cap, body), WAIT)

        await fills_max_payload(c, submit)
        await fills_max_payload(c, call)
    finally:
        await c.close()
