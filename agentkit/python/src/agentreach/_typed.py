"""Typed payloads: decoding into a handler's annotation, encoding results.

A handler's payload parameter annotated with a dataclass, a pydantic model,
``bytes`` or a plain type gets its payload converted (a payload that does
not fit is a BadRequest naming the field); without an annotation it gets
the decoded value as it is.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Any, Callable, Optional

from .errors import BadRequest

try:  # pydantic is optional
    import pydantic
except ImportError:  # pragma: no cover - exercised where pydantic is absent
    pydantic = None  # type: ignore[assignment]

_NONE = type(None)
_KIND = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", bytes: "bytes",
         list: "an array", dict: "an object", tuple: "an array"}


def _got(value: Any) -> str:
    if value is None:
        return "null"
    for t in (bool, int, float, str, bytes, list, dict):
        if isinstance(value, t):
            return _KIND[t].split(" ", 1)[-1]
    return type(value).__name__


def is_model(tp: Any) -> bool:
    """Reports whether tp is a pydantic model class."""
    return pydantic is not None and inspect.isclass(tp) and issubclass(tp, pydantic.BaseModel)


def convert(tp: Any, value: Any, where: str = "payload") -> Any:
    """Converts a decoded value into type tp, raising BadRequest naming where."""
    if tp is Any or tp is object or tp is inspect.Parameter.empty:
        return value
    if is_model(tp):
        try:
            return tp.model_validate({} if value is None else value)
        except pydantic.ValidationError as e:
            problems = "; ".join(
                f"{where}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" if err["loc"] else f"{where}: {err['msg']}"
                for err in e.errors()
            )
            raise BadRequest(problems) from None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(tp, value, where)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and _NONE in args:
            return None
        errors = []
        for a in args:
            if a is _NONE:
                continue
            try:
                return convert(a, value, where)
            except BadRequest as e:
                errors.append(e.message)
        raise BadRequest(errors[0] if len(errors) == 1 else f"{where} fits none of its types: {'; '.join(errors)}")
    if origin is typing.Literal:
        if value in args:
            return value
        raise BadRequest(f"{where} must be one of {', '.join(repr(a) for a in args)}, got {value!r}")
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise BadRequest(f"{where} must be an array, got {_got(value)}")
        container = origin or tp
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(value):
                raise BadRequest(f"{where} must have {len(args)} elements, got {len(value)}")
            return tuple(convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        return container(convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise BadRequest(f"{where} must be an object, got {_got(value)}")
        vt = args[1] if len(args) == 2 else Any
        return {k: convert(vt, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise BadRequest(f"{where} must be a number, got {_got(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise BadRequest(f"{where} must be an integer, got {_got(value)}")
    if tp in (bool, str, bytes):
        if isinstance(value, tp) and not (tp is not bool and isinstance(value, bool)):
            return value
        raise BadRequest(f"{where} must be {_KIND[tp]}, got {_got(value)}")
    if inspect.isclass(tp):
        if isinstance(value, tp):
            return value
        raise BadRequest(f"{where} must be {tp.__name__}, got {_got(value)}")
    return value


def _dataclass(tp: type, value: Any, where: str) -> Any:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be an object, got {_got(value)}")
    hints = typing.get_type_hints(tp)
    kwargs = {}
    for f in dataclasses.fields(tp):
        if not f.init:
            continue
        name = f"{where}.{f.name}" if where != "payload" else f"payload field {f.name!r}"
        if f.name in value:
            kwargs[f.name] = convert(hints.get(f.name, Any), value[f.name], name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise BadRequest(f"{name} is required")
    try:
        return tp(**kwargs)
    except (TypeError, ValueError) as e:  # a __post_init__ check
        raise BadRequest(f"{where}: {e}") from None


def payload_type(fn: Callable[..., Any]) -> Any:
    """Returns the annotation of a handler's second parameter (the payload)."""
    params = list(inspect.signature(fn).parameters.values())
    if len(params) < 2:
        raise TypeError("a handler takes (ctx, payload)")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:  # a forward reference to a class it cannot see (say, one local to a function)
        raise TypeError(f"the annotation of parameter {params[1].name!r} cannot be resolved: {e}") from None
    return hints.get(params[1].name, inspect.Parameter.empty)


def to_wire(value: Any, json_mode: bool) -> Any:
    """Returns a result as plain values an encoder takes.

    Dataclasses and pydantic models become dicts, recursively.
    """
    if is_model(type(value)):
        return value.model_dump(mode="json" if json_mode else "python")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_wire(getattr(value, f.name), json_mode) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: to_wire(v, json_mode) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_wire(v, json_mode) for v in value]
    return value


def decode_as(tp: Optional[Any], value: Any) -> Any:
    """Converts a decoded reply into tp (None: as it is)."""
    return value if tp is None else convert(tp, value, "result")
