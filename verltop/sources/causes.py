"""Ray's death causes: which context, the whole text (secrets redacted), and the one line that says why.

Ray 2.60 nests the cause of an actor's death in one of ``creation_task_failure_context`` (``__init__``
raised: ``formatted_exception_string``, a full traceback), ``runtime_env_failed_context`` (pip, conda, uv...
could not build the env: ``error_message``, a traceback ending in the tool's own output),
``actor_died_error_context`` (the worker died or was killed), ``actor_unschedulable_context`` and
``oom_context``. The first line of these is always Ray's own preamble ("Could not create the actor because
its associated runtime env failed to be created."), never the reason; the reason is near the end.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from verltop.convert import one_line, to_bool

SHORT_CHARS = 300

_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[(?:3[0-9]|39)m")
# a Python exception line: ``ModuleNotFoundError: No module named 'x'``, ``ray.exceptions.Foo: ...``
_EXC = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout|Warning)\w*)(?::\s*(.*))?$")
# Ray's wrappers around the real exception: their text is not the reason
_WRAPPERS = ("ActorDiedError", "RayTaskError", "RuntimeEnvSetupError", "SubprocessCalledProcessError",
             "CreationTaskError", "RayActorError", "TaskUnschedulableError", "ActorUnschedulableError")
# tool output that says why an install failed (pip, uv, conda, shells)
_TOOL_ERROR = re.compile(r"^(?:ERROR:|error:|CondaError|CondaValueError|PackagesNotFoundError|×|.*: command not found$)")
_SECRETS = (
    (re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/:@]+:[^\s/@]+@"), r"\1***@"),
    (re.compile(r"(?i)\b(token|password|passwd|secret|api[_-]?key|access[_-]?key)(\s*[=:]\s*)[^\s'\",]+"), r"\1\2***"),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1***"),
)


def redact(text: str) -> str:
    """Credentials in URLs (``https://user:pass@index``), ``token=…``-like pairs and bearer tokens → ``***``:
    pip's output quotes index URLs, which may carry them."""
    for rx, sub in _SECRETS:
        text = rx.sub(sub, text)
    return text


def death_parts(dc: Any) -> tuple[str | None, str | None, bool]:
    """``(kind, whole text, never_started)`` of a ``death_cause``; kind is the context name without
    ``_context`` (``runtime_env_failed``...), or ``None`` when Ray gave none."""
    if dc is None:
        return None, None, False
    if isinstance(dc, str):
        return ("unknown", redact(dc), False) if dc.strip() else (None, None, False)
    if not isinstance(dc, dict):
        return None, None, False
    for key, ctx in dc.items():
        if not isinstance(ctx, dict):
            continue
        kind = key[: -len("_context")] if key.endswith("_context") else key
        kind = {"creationTaskFailure": "creation_task_failure", "runtimeEnvFailed": "runtime_env_failed",
                "actorDiedError": "actor_died_error"}.get(kind, kind)
        if kind == "actor_died_error":
            kind = "actor_died"
        text = None
        for field in ("error_message", "formatted_exception_string", "errorMessage", "formattedExceptionString"):
            v = ctx.get(field)
            if isinstance(v, str) and v.strip():
                text = v
                break
        if text is None:
            r = ctx.get("reason")
            text = r if isinstance(r, str) and r else None
        never = to_bool(ctx.get("never_started", ctx.get("neverStarted"))) or False
        return kind, (redact(_ANSI.sub("", text)) if text else None), never
    return None, None, False


@lru_cache(maxsize=4096)
def telling_line(kind: str | None, text: str | None) -> str | None:
    """The line of a death text that says why: a pip/uv/conda error line for a runtime env, the last real
    exception of a traceback (not Ray's wrapper around it), else Ray's first sentence(s)."""
    if not text:
        return None
    lines = [ln.strip() for ln in _ANSI.sub("", text).splitlines()]
    lines = [ln for ln in lines if ln and not set(ln) <= {"^", "~", " "}]
    if kind == "runtime_env_failed":
        tool = [ln for ln in lines if _TOOL_ERROR.match(ln)]
        if tool:
            return one_line(tool[-1], SHORT_CHARS)
    exc = _last_exception(lines)
    if exc is not None and kind != "actor_died":
        return one_line(exc, SHORT_CHARS)
    return _ray_sentence(lines[0] if lines else text) or (one_line(exc, SHORT_CHARS) if exc else None)


def _last_exception(lines: list[str]) -> str | None:
    found = None
    for ln in lines:
        m = _EXC.match(ln)
        if m and m.group(1) not in _WRAPPERS and not ln.startswith(("File ", "Traceback")):
            found = f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
    return found


def _ray_sentence(first: str) -> str | None:
    """Ray's own death message without its boilerplate: ``worker died (SYSTEM_ERROR): Worker unexpectedly
    exits with a connection error code 2. End of file.`` rather than 700 characters of advice."""
    s = first.split(" Some common causes include", 1)[0]
    m = re.search(r"Worker exit type: (\w+)(?: Worker exit detail: (.*))?", s)
    if m and "worker process has died" in s:
        detail = (m.group(2) or "").strip()
        return one_line(f"worker process died ({m.group(1)})" + (f": {detail}" if detail else ""), SHORT_CHARS)
    if "owner has died" in s:
        m = re.search(r"Owner worker exit type: (\w+)", s)
        return "its owner (the process that created it) died" + (f" ({m.group(1)})" if m else "")
    return one_line(s, SHORT_CHARS) or None


_LOG_FATAL = re.compile(r"^(Fatal Python error:.*|terminate called.*|.*Segmentation fault.*|Killed|Aborted.*|"
                        r".*CUDA error:.*|.*NCCL error.*|.*Watchdog caught collective operation timeout.*)$")


def log_cause(text: str | None) -> str | None:
    """Why a worker process ended, from the tail of its stderr: a fatal signal or abort line, else its last
    exception, else nothing (a process that called ``os._exit`` leaves no word)."""
    if not text:
        return None
    lines = [ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()]
    fatal = [ln for ln in lines if _LOG_FATAL.match(ln)]
    if fatal:
        return one_line(redact(fatal[-1]), SHORT_CHARS)
    exc = _last_exception(lines)
    return one_line(redact(exc), SHORT_CHARS) if exc else None
