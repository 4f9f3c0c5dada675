"""Capability declarations (REACH_CAPS): validated at start, field by field.

A declaration describes an agent type (DESIGN.md §10)::

    {"version": "1.2.0", "description": "Reads the orders database",
     "capabilities": [{"name": "orders.query", "mode": "read", "idempotent": True,
                       "input_schema": {"type": "object", "required": ["sku"]},
                       "timeout_ms": 2000, "cost": 0.002}],
     "labels": {"engine": ["postgres"]}, "limits": {"max_rows": 10000},
     "permissions": ["read"], "refuses": ["write"], "depends_on": ["ext.orders-db"],
     "tags": ["team-a"]}

Every problem is an InvalidConfig naming the field, e.g.
``declaration.capabilities[0].timeout_ms: must be a non-negative integer``.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from ._wire import capability_problem
from .errors import InvalidConfig

_TOP = {"type", "version", "description", "capabilities", "labels", "limits", "permissions",
        "refuses", "depends_on", "tags"}
_CAP = {"name", "description", "mode", "idempotent", "input_schema", "output_schema", "timeout_ms", "cost"}
MODES = ("read", "write")


def _bad(field: str, problem: str) -> InvalidConfig:
    return InvalidConfig(f"{field}: {problem}")


def _strings(field: str, v: Any) -> None:
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise _bad(field, "must be a list of non-empty strings")


def _number(field: str, v: Any, integer: bool = False) -> None:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool) or v < 0:
        raise _bad(field, f"must be a non-negative {'integer' if integer else 'number'}, got {v!r}")


def validate(decl: Any, agent_type: str, served: Iterable[str]) -> dict[str, Any]:
    """Validates a declaration for an agent type serving the given capabilities.

    It returns the declaration as it is stored: with ``type`` set. Every
    declared capability must be one the agent serves.
    """
    if not isinstance(decl, dict):
        raise _bad("declaration", f"must be a dict, got {type(decl).__name__}")
    for k in decl:
        if k not in _TOP:
            raise _bad(f"declaration.{k}", f"unknown field (known: {', '.join(sorted(_TOP))})")
    out = dict(decl)
    if out.setdefault("type", agent_type) != agent_type:
        raise _bad("declaration.type", f"{out['type']!r} differs from the agent's type {agent_type!r}")
    for k in ("version", "description"):
        if k in out and not isinstance(out[k], str):
            raise _bad(f"declaration.{k}", "must be a string")
    served = set(served)
    caps = out.get("capabilities", [])
    if not isinstance(caps, list):
        raise _bad("declaration.capabilities", "must be a list")
    seen: set[str] = set()
    for i, c in enumerate(caps):
        where = f"declaration.capabilities[{i}]"
        _capability(where, c)
        if c["name"] in seen:
            raise _bad(f"{where}.name", f"{c['name']!r} is declared twice")
        if c["name"] not in served:
            raise _bad(f"{where}.name", f"{c['name']!r} is not served by this agent (it serves {', '.join(sorted(served))})")
        seen.add(c["name"])
    labels = out.get("labels", {})
    if not isinstance(labels, dict):
        raise _bad("declaration.labels", "must be a dict of lists of strings")
    for k, v in labels.items():
        _strings(f"declaration.labels.{k}", v)
    limits = out.get("limits", {})
    if not isinstance(limits, dict):
        raise _bad("declaration.limits", "must be a dict of numbers")
    for k, v in limits.items():
        _number(f"declaration.limits.{k}", v)
    for k in ("permissions", "refuses", "depends_on", "tags"):
        if k in out:
            _strings(f"declaration.{k}", out[k])
    both = set(out.get("permissions", [])) & set(out.get("refuses", []))
    if both:
        raise _bad("declaration.refuses", f"{', '.join(sorted(both))} also in permissions")
    return out


def _capability(where: str, c: Any) -> None:
    if not isinstance(c, dict):
        raise _bad(where, "must be a dict")
    for k in c:
        if k not in _CAP:
            raise _bad(f"{where}.{k}", f"unknown field (known: {', '.join(sorted(_CAP))})")
    problem: Optional[str] = capability_problem(c.get("name"))
    if problem:
        raise _bad(f"{where}.name", problem)
    if "description" in c and not isinstance(c["description"], str):
        raise _bad(f"{where}.description", "must be a string")
    if "mode" in c and c["mode"] not in MODES:
        raise _bad(f"{where}.mode", f"must be one of {', '.join(MODES)}, got {c['mode']!r}")
    if "idempotent" in c and not isinstance(c["idempotent"], bool):
        raise _bad(f"{where}.idempotent", "must be true or false")
    for k in ("input_schema", "output_schema"):
        if k in c and not isinstance(c[k], dict):
            raise _bad(f"{where}.{k}", "must be a JSON Schema object (a dict)")
    if "timeout_ms" in c:
        _number(f"{where}.timeout_ms", c["timeout_ms"], integer=True)
    if "cost" in c:
        _number(f"{where}.cost", c["cost"])
