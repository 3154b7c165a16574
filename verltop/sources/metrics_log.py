"""verl's step metrics as its ``Tracking`` logger writes them (verl 0.9.1, ``verl/utils/tracking.py``):

- the ``console`` backend (``utils/logger/aggregate_logger.py`` ``concat_dict_to_str``) prints one line per
  step, ``step:N - key:value - key:value``, only numeric values, each as ``pprint.pformat`` writes it:
  ``0.5``, ``nan``, ``inf``, ``-inf``, ``True``, and with numpy 2 ``np.float64(0.5)`` / ``np.int64(3)``.
  Ray prefixes the lines it forwards to a driver with ``(TaskRunner pid=…)``.
- the ``file`` backend writes JSONL, ``{"step": N, "data": {...}}`` (orjson: NaN and inf become ``null``),
  to ``$VERL_FILE_LOGGER_PATH``, else ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``; it prints
  ``Creating file logger at <path>`` when it opens the file.

Parsing is pure; reading a JSONL file goes on from the byte offset where the last read stopped.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass

NAN = float("nan")
Metrics = dict[str, float]

# "step:12 - " at a line's start, or after Ray's "(Actor pid=…) " prefix
_STEP = re.compile(r"(?:^|\) )step:(-?\d+)(?: - |\s*$)")
_WRAPPED = re.compile(r"^np\.(?:float|int|uint|bool_?)\w*\((.*)\)$")
_FILE_LOGGER = re.compile(r"Creating file logger at (\S.*?)\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SPECIAL = {"nan": NAN, "inf": math.inf, "-inf": -math.inf, "True": 1.0, "False": 0.0}
MAX_LINE = 1 << 20  # a longer line is not a metrics line (or is damaged)


def value(text: str) -> float | None:
    """One console value as a float (NaN and inf kept), None when it is not a number."""
    try:
        return float(text)  # the common case: a plain number (float() takes nan, inf, -inf too)
    except ValueError:
        pass
    t = text.strip()
    m = _WRAPPED.match(t)
    if m:
        t = m.group(1)
    v = _SPECIAL.get(t)
    if v is not None:
        return v
    try:
        return float(t)
    except ValueError:
        return None


def console_line(line: str, after: int | None = None) -> tuple[int, Metrics] | None:
    """``(step, {key: value})`` of one console-backend line, None for any other line (and, with ``after``,
    for a step at or before it: its values are not parsed)."""
    if "step:" not in line or len(line) > MAX_LINE:
        return None
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    m = _STEP.search(line)
    if m is None:
        return None
    step = int(m.group(1))
    if after is not None and step <= after:
        return None
    out: Metrics = {}
    for part in line[m.end():].rstrip("\r\n").split(" - "):
        key, sep, raw = part.rpartition(":")  # values never hold ':', keys may
        if not sep or not key:
            continue
        v = value(raw)
        if v is not None:
            out[key.strip()] = v
    return step, out


def jsonl_line(line: str | bytes) -> tuple[int, Metrics] | None:
    """``(step, {key: value})`` of one file-backend line (null as NaN: orjson writes NaN and inf so), None when
    the line is not one."""
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("step"), int) or not isinstance(doc.get("data"), dict):
        return None
    out: Metrics = {}
    for k, v in doc["data"].items():
        if v is None:
            out[str(k)] = NAN
        elif isinstance(v, (int, float)):
            out[str(k)] = float(v)
    return doc["step"], out


def console_lines(text: str, after: int | None = None) -> list[tuple[int, Metrics]]:
    """Every metrics line of a log's text, in order (with ``after``: only the steps after it)."""
    return [hit for line in text.splitlines() if (hit := console_line(line, after)) is not None]


def file_logger_path(text: str) -> str | None:
    """The JSONL path the file backend announced in a log, if any (the last one)."""
    found = None
    for line in text.splitlines():
        if "Creating file logger at" in line:
            m = _FILE_LOGGER.search(line)
            if m:
                found = m.group(1)
    return found


@dataclass(slots=True)
class JsonlFollower:
    """Reads a JSONL file from where it stopped: only bytes appended since are read and parsed."""

    path: str
    offset: int = 0
    _rest: bytes = b""
    inode: int | None = None

    def read(self, max_bytes: int = 64 << 20) -> list[tuple[int, Metrics]]:
        """The steps written since the last read (OSError when the file cannot be read)."""
        st = os.stat(self.path)
        if self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset):
            self.offset, self._rest = 0, b""  # a new file (a new run): read it from the start
        self.inode = st.st_ino
        if st.st_size <= self.offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(min(max_bytes, st.st_size - self.offset))
        self.offset += len(data)
        data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()  # an incomplete last line waits for the rest
        if len(self._rest) > MAX_LINE:
            self._rest = b""
        return [hit for ln in lines if ln.strip() and (hit := jsonl_line(ln)) is not None]
