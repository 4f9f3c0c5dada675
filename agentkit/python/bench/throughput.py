"""Sustained echo throughput through the dispatcher: the Python SDK's agent
against agentkit's (``agentreach demo``), same machine, same run, same Go
closed-loop caller (bench/loadgen.go); then heartbeat gaps while every slot
of a Python agent is busy with CPU-bound handlers.

    make build && .venv/bin/python agentkit/python/bench/throughput.py [--rounds 2] [--measure 10]

It prints one JSON object with every figure. Informative, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats

REPO = Path(__file__).resolve().parents[3]
BIN = REPO / "bin" / "agentreach"
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


async def wait_record(url: str, agent_prefix: str, present: bool = True) -> str:
    """Waits until a REACH_AGENTS key starting with agent_prefix exists (or none does)."""
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value("REACH_AGENTS")
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                keys = [k for k in await kv.keys() if k.startswith(agent_prefix)]
            except nats.js.errors.NoKeysError:
                keys = []
            if bool(keys) == present:
                return keys[0] if keys else ""
            await asyncio.sleep(0.05)
        raise RuntimeError(f"agent {agent_prefix}* {'did not register' if present else 'did not leave'}")
    finally:
        await nc.close()


def loadgen(url: str, capability: str, measure: float, callers: int) -> dict:
    out = subprocess.run(["go", "run", str(HERE / "loadgen.go"), "-server", url, "-capability", capability,
                          "-measure", f"{measure}s", "-callers", str(callers)],
                         cwd=REPO, capture_output=True, text=True, timeout=measure + 120, check=True)
    return json.loads(out.stdout)


async def heartbeat_gaps(url: str, agent_id: str, seconds: float, load: "asyncio.Future") -> list[float]:
    """Collects the gaps between the record's puts, by the server's timestamps, while load runs."""
    nc = await nats.connect(url)
    kv = await nc.jetstream().key_value("REACH_AGENTS")
    w = await kv.watch(agent_id)
    stamps = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end or not load.done():
            try:
                e = await w.updates(timeout=1)
            except nats.errors.TimeoutError:
                continue
            if e is not None and e.operation is None:
                stamps.append(e.created)
    finally:
        await w.stop()
        await nc.close()
    return [(b - a).total_seconds() for a, b in zip(stamps[1:], stamps[2:])]


async def cpu_bound(url: str, agent_id: str, slots: int, threads: bool, seconds: float) -> dict:
    """Keeps every slot of a Python agent spinning for `seconds` and measures heartbeat gaps."""
    agent = start([sys.executable, str(HERE / "echo_agent.py"), "--server", url, "--id", agent_id,
                   "--max-concurrent", str(slots)] + (["--threads"] if threads else []))
    try:
        await wait_record(url, agent_id)
        nc = await nats.connect(url)
        answered = 0

        async def caller() -> None:
            nonlocal answered
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                m = await nc.request("reach.task.spin", b"0.5", timeout=30,
                                     headers={"Content-Type": "application/json"})
                if m.headers.get("Reach-Status") == "FINISHED":
                    answered += 1

        load = asyncio.ensure_future(asyncio.gather(*(caller() for _ in range(slots))))
        gaps = await heartbeat_gaps(url, agent_id, seconds, load)
        await load
        await nc.close()
        return {"slots": slots, "threads": threads, "answered": answered, "gaps_s": [round(g, 3) for g in gaps],
                "max_gap_s": max(gaps) if gaps else None}
    finally:
        stop(agent)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--measure", type=float, default=10.0)
    ap.add_argument("--callers", type=int, default=64)
    args = ap.parse_args()
    subprocess.run(["go", "build", "-o", os.devnull, str(HERE / "loadgen.go")], cwd=REPO, check=True)
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        url = f"nats://127.0.0.1:{port}"
        up = subprocess.Popen([str(BIN), "up", "--nats-listen", f"127.0.0.1:{port}", "--data-dir", d,
                               "--heartbeat", "1s"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert up.stdout is not None
            for line in up.stdout:  # the banner comes once the dispatcher runs
                if line.startswith("Agent-Reach is up."):
                    break
            else:
                raise RuntimeError("agentreach up exited before it was up")
            figures: dict = {"go": [], "python": []}
            for r in range(args.rounds):
                go = start([str(BIN), "demo", "--instances", "1", "--server", url])
                await wait_record(url, "echo-")
                figures["go"].append(loadgen(url, "echo", args.measure, args.callers))
                stop(go)
                await wait_record(url, "echo-", present=False)
                py = start([sys.executable, str(HERE / "echo_agent.py"), "--server", url, "--id", f"pyecho-{r}"])
                await wait_record(url, f"pyecho-{r}")
                figures["python"].append(loadgen(url, "echo", args.measure, args.callers))
                stop(py)
                await wait_record(url, f"pyecho-{r}", present=False)
            go_rps = sum(x["rps"] for x in figures["go"]) / len(figures["go"])
            py_rps = sum(x["rps"] for x in figures["python"]) / len(figures["python"])
            figures["go_rps"], figures["python_rps"] = round(go_rps), round(py_rps)
            figures["ratio_python_over_go"] = round(py_rps / go_rps, 3)
            figures["cpu_async"] = await cpu_bound(url, "pyspin-async", 4, False, 8)
            figures["cpu_threads"] = await cpu_bound(url, "pyspin-threads", 4, True, 8)
            figures["heartbeat_s"] = 1.0
            print(json.dumps(figures, indent=1))
        finally:
            stop(up)


if __name__ == "__main__":
    asyncio.run(main())
