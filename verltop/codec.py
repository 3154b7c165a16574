"""The model as plain JSON data, every field of it, and back: what recordings store.

The public contracts (``snapshot --json``, ``dump --json``: ``verltop.text.contract``) are views made for
scripts: they drop fields a view needs (node ids, task start times, every sample of a dump) and add derived
ones (``stall_reason``).
A recording must rebuild the very objects the screens were given, so it stores each dataclass field by its
name, as the type hints of ``verltop.model`` say, and decodes by the same hints:

- a field missing from the data (written by an older verltop) takes its default, else ``None`` when its
  type allows it; a field the model no longer has is ignored. So recordings survive fields being added
  and removed; renaming or changing the meaning of one needs a new recording format version.
- a field whose form changed is brought up to date before decoding (``_OLD_FORMS``: a chain end's or a
  suspect's reason, once a sentence, is now data; an old sentence is kept as a ``said`` reason).
- fields equal to their declared default are left out (most of ``Problem.remedy``, ``ActorRow.stalls``).
- named tuples (``Frame``) are written as lists, in field order: stacks hold thousands of them.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, Union

Decoder = Callable[[Any], Any]


class DecodeError(ValueError):
    """Data that cannot be the model type asked for (a damaged or foreign recording)."""


# ---------------------------------------------------------------- encoding


def to_data(obj: Any) -> Any:
    """Any model object (dataclass, named tuple, tuple, dict, scalar) as JSON-ready data."""
    if obj is None or isinstance(obj, (str, int, float)):
        return obj
    if isinstance(obj, tuple):
        return [to_data(v) for v in obj]  # named tuples too: positional
    enc = _encoder(type(obj)) if dataclasses.is_dataclass(obj) else None
    if enc is not None:
        return enc(obj)
    if isinstance(obj, list):
        return [to_data(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_data(v) for k, v in obj.items()}
    if isinstance(obj, (set, frozenset)):
        return sorted(to_data(v) for v in obj)
    raise TypeError(f"cannot encode {type(obj).__name__}")


@cache
def _encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    specs = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        specs.append((f.name, default))

    def enc(obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, default in specs:
            v = getattr(obj, name)
            if default is not dataclasses.MISSING and v == default:
                continue
            out[name] = v if v is None or type(v) in (str, int, float, bool) else to_data(v)
        return out

    return enc


def fields_of(cls: type) -> tuple[str, ...]:
    """The field names of a model dataclass, in order."""
    return tuple(f.name for f in dataclasses.fields(cls))


# ---------------------------------------------------------------- decoding


def from_data(tp: Any, data: Any) -> Any:
    """``data`` (as ``to_data`` wrote it) decoded as type ``tp`` (a class or a type hint)."""
    return decoder(tp)(data)


@cache
def decoder(tp: Any) -> Decoder:
    """A compiled decoder for one type hint (cached: decoding 1,000 rows runs no type logic)."""
    if tp is Any or tp is object:
        return _same
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            inner = decoder(args[0])
            return inner if inner is _same or inner is _float else (lambda d: None if d is None else inner(d))
        return _same  # int | float and the like: JSON already has the right scalar
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            item = decoder(args[0])
            return lambda d: None if d is None else tuple(item(x) for x in _seq(d, tp))
        items = [decoder(a) for a in args]
        return lambda d: None if d is None else tuple(f(x) for f, x in zip(items, _seq(d, tp), strict=False))
    if origin in (list, typing.List):  # noqa: UP006 - both spellings may appear in hints
        (a,) = typing.get_args(tp) or (Any,)
        item = decoder(a)
        return lambda d: None if d is None else [item(x) for x in _seq(d, tp)]
    if origin in (dict, typing.Dict):  # noqa: UP006
        args = typing.get_args(tp) or (Any, Any)
        val = decoder(args[1])
        return lambda d: None if d is None else {k: val(v) for k, v in _map(d, tp).items()}
    if origin in (frozenset, set):
        (a,) = typing.get_args(tp) or (Any,)
        item = decoder(a)
        return lambda d: None if d is None else origin(item(x) for x in _seq(d, tp))
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return _dataclass_decoder(tp)
        if issubclass(tp, tuple) and hasattr(tp, "_fields"):
            return _namedtuple_decoder(tp)
        if tp is float:
            return _float
    # str, int, bool: JSON already holds them as they were written (checking each would double the cost
    # of decoding a 1,000-row snapshot)
    return _same


def _float(d: Any) -> Any:
    return float(d) if type(d) is int else d  # a hand-written 0 for 0.0


def _same(d: Any) -> Any:
    return d


def _bad(d: Any, tp: Any) -> Any:
    raise DecodeError(f"{type(d).__name__} where {getattr(tp, '__name__', tp)} was expected")


def _seq(d: Any, tp: Any) -> list:
    if not isinstance(d, list):
        _bad(d, tp)
    return d


def _map(d: Any, tp: Any) -> dict:
    if not isinstance(d, dict):
        _bad(d, tp)
    return d


def _optional(tp: Any) -> bool:
    return tp is Any or (typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp))


def _said(d: dict[str, Any], one: bool) -> dict[str, Any]:
    """A reason an older verltop wrote as a sentence (``reason``), as the model now holds it (``why``)."""
    if "reason" not in d or "why" in d:
        return d
    why = {"kind": "said", "text": d["reason"]}
    return {k: v for k, v in d.items() if k != "reason"} | {"why": why if one else [why]}


# older forms of a model class's data (module, class) → the function that brings them up to date
_OLD_FORMS: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("verltop.model.stacks", "ChainEnd"): lambda d: _said(d, True),
    ("verltop.model.stacks", "Suspect"): lambda d: _said(d, False),
}


def _dataclass_decoder(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    upgrade = _OLD_FORMS.get((cls.__module__, cls.__name__))
    specs = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        dec_f = decoder(hints[f.name])
        specs.append((f.name, None if dec_f is _same else dec_f, has_default, _optional(hints[f.name])))

    def dec(d: Any) -> Any:
        if d is None:
            return None
        if not isinstance(d, dict):
            _bad(d, cls)
        if upgrade is not None:
            d = upgrade(d)
        kw = {}
        for name, f, has_default, optional in specs:
            if name in d:
                v = d[name]
                kw[name] = v if f is None or v is None else f(v)
            elif not has_default:
                if not optional:
                    raise DecodeError(f"{cls.__name__}.{name} is missing")
                kw[name] = None
        return cls(**kw)

    return dec


def _namedtuple_decoder(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    decs = [decoder(hints.get(n, Any)) for n in cls._fields]
    defaults = getattr(cls, "_field_defaults", {})
    required = sum(1 for n in cls._fields if n not in defaults)

    def dec(d: Any) -> Any:
        if d is None:
            return None
        if isinstance(d, dict):  # written by hand or by a contract view
            d = [d.get(n, defaults.get(n)) for n in cls._fields]
        if not isinstance(d, list) or len(d) < required:
            _bad(d, cls)
        return cls(*(f(x) for f, x in zip(decs, d[: len(decs)], strict=False)))

    return dec
