"""Capability declarations (REACH_CAPS), checked at start by docs/declarations.md.

A declaration says what an agent type's instances can do and what they
refuse; the agent writes it under its type at start, and dispatchers match
requirements against it and check payloads against its input schemas::

    {"version": "1.2.0", "description": "Reads the orders database",
     "capabilities": [{"name": "orders.query", "mode": "read", "idempotent": True,
                       "input_schema": {"type": "object", "required": ["sku"]},
                       "timeout_ms": 2000, "cost": 0.002}],
     "labels": {"engine": ["postgres"]}, "limits": {"max_rows": 10000},
     "permissions": ["read"], "refuses": ["write"], "depends_on": ["ext.orders-db"],
     "tags": ["team-a"]}

The rules are the Go model's (registry.Declaration): unknown keys and
values of the wrong type are errors, names are dotted lowercase tokens, and
every problem is listed at once, each named by its path, in one
InvalidConfig: ``declaration.capabilities[0].timeout_ms: must not be
negative, got -1; declaration.labels.engine: …``. Beyond them, every
declared capability must be one the agent serves. Input schemas must be
JSON Schema objects; the dispatchers compile them.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

from ._wire import capability_problem
from .errors import InvalidConfig

MAX_SIZE = 1 << 20
"""MAX_SIZE bounds a declaration as stored, in bytes of JSON."""

_TOP = {"type", "version", "description", "capabilities", "labels", "limits", "permissions",
        "refuses", "depends_on", "tags"}
_CAP = {"name", "description", "mode", "idempotent", "input_schema", "output_schema", "timeout_ms", "cost"}
MODES = ("read", "write")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, problem: str) -> None:
        self.items.append(f"declaration.{path}: {problem}" if path else f"declaration: {problem}")

    def unknown(self, path: str, d: dict[str, Any], known: set[str]) -> None:
        for k in d:
            if k not in known:
                self.add(f"{path}{k}", f"unknown field (known: {', '.join(sorted(known))})")

    def names(self, path: str, v: Any, check_name: bool = True) -> None:
        if not isinstance(v, list):
            self.add(path, f"must be a list of strings, got {type(v).__name__}")
            return
        seen: set[Any] = set()
        for i, s in enumerate(v):
            if not isinstance(s, str) or not s.strip():
                self.add(f"{path}[{i}]", "must be a non-empty string")
                continue
            problem = capability_problem(s) if check_name else None
            if problem:
                self.add(f"{path}[{i}]", problem)
            if s in seen:
                self.add(f"{path}[{i}]", f"{s!r} is listed twice")
            seen.add(s)


def validate(decl: Any, agent_type: str, served: Iterable[str]) -> dict[str, Any]:
    """Validates a declaration for an agent type serving the given capabilities.

    It returns the declaration as it is stored: with ``type`` set.
    """
    if not isinstance(decl, dict):
        raise InvalidConfig(f"declaration: must be a dict, got {type(decl).__name__}")
    p = _Problems()
    p.unknown("", decl, _TOP)
    out = dict(decl)
    if out.setdefault("type", agent_type) != agent_type:
        p.add("type", f"{out['type']!r} differs from the agent's type {agent_type!r}")
    for k in ("version", "description"):
        if k in out and not isinstance(out[k], str):
            p.add(k, "must be a string")
    _capabilities(p, out.get("capabilities"), set(served))
    labels = out.get("labels", {})
    if not isinstance(labels, dict):
        p.add("labels", "must be a dict of lists of strings")
        labels = {}
    for k, v in labels.items():
        problem = capability_problem(k)
        if problem:
            p.add(f"labels.{k}", problem)
        if isinstance(v, list) and not v:
            p.add(f"labels.{k}", "at least one value is required")
        p.names(f"labels.{k}", v, check_name=False)
    limits = out.get("limits", {})
    if not isinstance(limits, dict):
        p.add("limits", "must be a dict of numbers")
        limits = {}
    for k, v in limits.items():
        problem = capability_problem(k)
        if problem:
            p.add(f"limits.{k}", problem)
        if not _number(v):
            p.add(f"limits.{k}", f"must be a finite number, got {v!r}")
    for k in ("permissions", "refuses", "depends_on"):
        if k in out:
            p.names(k, out[k])
    if "tags" in out:
        p.names("tags", out["tags"], check_name=False)
    granted = set(out.get("permissions") or []) if isinstance(out.get("permissions"), list) else set()
    for i, perm in enumerate(out.get("refuses") or [] if isinstance(out.get("refuses"), list) else []):
        if perm in granted:
            p.add(f"refuses[{i}]", f"{perm!r} is also in permissions: a permission is granted or refused, not both")
    if not p.items:
        try:
            size = len(json.dumps(out).encode())
        except (TypeError, ValueError) as e:
            p.add("", f"is not JSON: {e}")
        else:
            if size > MAX_SIZE:
                p.add("", f"{size} bytes as JSON, more than the {MAX_SIZE} allowed")
    if p.items:
        raise InvalidConfig("; ".join(p.items))
    return out


def _capabilities(p: _Problems, caps: Any, served: set[str]) -> None:
    if not isinstance(caps, list) or not caps:
        p.add("capabilities", "at least one is required" if isinstance(caps, list) or caps is None
              else "must be a list")
        return
    seen: set[str] = set()
    for i, c in enumerate(caps):
        path = f"capabilities[{i}]"
        if not isinstance(c, dict):
            p.add(path, "must be a dict")
            continue
        p.unknown(f"{path}.", c, _CAP)
        name = c.get("name")
        problem = capability_problem(name)
        if problem:
            p.add(f"{path}.name", problem)
        elif name in seen:
            p.add(f"{path}.name", f"{name!r} is declared twice")
        elif name not in served:
            p.add(f"{path}.name", f"{name!r} is not served by this agent (it serves {', '.join(sorted(served))})")
        if isinstance(name, str):
            seen.add(name)
        if "description" in c and not isinstance(c["description"], str):
            p.add(f"{path}.description", "must be a string")
        if c.get("mode", "") not in ("", *MODES):
            p.add(f"{path}.mode", f"want 'read', 'write' or nothing, got {c['mode']!r}")
        if "idempotent" in c and not isinstance(c["idempotent"], bool):
            p.add(f"{path}.idempotent", "must be true or false")
        for k in ("input_schema", "output_schema"):
            if k in c and not isinstance(c[k], (dict, bool)):
                p.add(f"{path}.{k}", "must be a JSON Schema (an object)")
        t = c.get("timeout_ms", 0)
        if isinstance(t, bool) or not isinstance(t, int):
            p.add(f"{path}.timeout_ms", f"must be an integer of milliseconds, got {t!r}")
        elif t < 0:
            p.add(f"{path}.timeout_ms", f"must not be negative, got {t}")
        if "cost" in c and not (_number(c["cost"]) and c["cost"] >= 0):
            p.add(f"{path}.cost", f"must be a finite number, 0 or more, got {c['cost']!r}")
