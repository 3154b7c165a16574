"""One big JSON array inside an answer, read an element at a time: a node's summary at 128 nodes is 7 MB of
JSON and 30 MB as Python objects when parsed whole, most of it (each worker's core-worker stats) never
looked at. The stdlib's C scanner parses one element, the caller keeps what it needs, and the rest is
freed before the next one. Imports only the stdlib."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


def _skip(s: str, i: int) -> int:
    while s[i] in _WS:
        i += 1
    return i


def each(text: str, path: tuple[str, ...], on_item: Callable[[Any], None]) -> list[dict[str, Any]]:
    """Call ``on_item`` with every element of the array at ``path`` (object keys from the top), in order.
    Returns the other members of each object along the path (top first; values parsed whole), for the
    envelope's fields (``result``, ``msg``, ``total``...). ValueError when the text is not JSON, or has no
    array at ``path``."""
    try:
        levels: list[dict[str, Any]] = []
        i = _object(text, _skip(text, 0), path, on_item, levels)
        if text[i:].strip():
            raise ValueError("extra data after the JSON value")
        if len(levels) != len(path):
            raise ValueError(f"no array at {'.'.join(path)}")
        return levels[::-1]
    except IndexError:
        raise ValueError("the JSON ends early") from None


def _object(s: str, i: int, path: tuple[str, ...], on_item: Callable[[Any], None],
            levels: list[dict[str, Any]]) -> int:
    """Walk the object at ``s[i]``, descending into ``path[0]``; returns the index past it."""
    if s[i] != "{":
        raise ValueError("not a JSON object")
    here: dict[str, Any] = {}
    i = _skip(s, i + 1)
    found = False
    if s[i] == "}":
        i += 1
    else:
        while True:
            key, i = _DECODER.raw_decode(s, i)
            i = _skip(s, i)
            if s[i] != ":":
                raise ValueError("':' expected")
            i = _skip(s, i + 1)
            if path and key == path[0] and not found and s[i] in "{[":
                found = True
                if len(path) == 1:
                    i = _array(s, i, on_item)
                else:
                    i = _object(s, i, path[1:], on_item, levels)
            else:
                here[key], i = _DECODER.raw_decode(s, i)
            i = _skip(s, i)
            if s[i] == ",":
                i = _skip(s, i + 1)
                continue
            if s[i] != "}":
                raise ValueError("',' or '}' expected")
            i += 1
            break
    if found:
        levels.append(here)
    return i


def _array(s: str, i: int, on_item: Callable[[Any], None]) -> int:
    if s[i] != "[":
        raise ValueError("not a JSON array")
    i = _skip(s, i + 1)
    if s[i] == "]":
        return i + 1
    while True:
        item, i = _DECODER.raw_decode(s, i)
        on_item(item)
        i = _skip(s, i)
        if s[i] == ",":
            i = _skip(s, i + 1)
            continue
        if s[i] != "]":
            raise ValueError("',' or ']' expected")
        return i + 1
