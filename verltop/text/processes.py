"""A process's title in words, for a narrow column."""

from __future__ import annotations

_PLUMBING = (("multiprocessing.resource_tracker", "resource_tracker"), ("multiprocessing.forkserver", "forkserver"),
             ("spawn_main(", "spawn child (starting)"))


def narrow_title(title: str | None) -> str:
    """A child process's title for a narrow column: ``VLLM::Worker_TP1`` → ``Worker_TP1``,
    ``sglang::scheduler_TP0`` → ``scheduler_TP0``; multiprocessing's helpers by what they are; else the
    command without its directory (``/usr/bin/python3 -m x`` → ``python3 -m x``)."""
    if not title:
        return "?"
    for needle, name in _PLUMBING:
        if needle in title:
            return name
    head, sep, rest = title.partition("::")
    if sep and head and " " not in head and head != "ray":
        return rest
    words = title.split()
    exe = words[0].rsplit("/", 1)[-1]
    if exe.startswith("python") and len(words) > 1:
        # the interpreter's flags say little: `python sandbox.py`, `python -m pkg.mod`, `python -c …`
        rest = [w for w in words[1:] if not (w.startswith("-") and w not in ("-m", "-c"))]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return f"{exe} -m {rest[1]}"
        if rest[:1] == ["-c"]:
            return f"{exe} -c …"
        if rest:
            return f"{exe} {rest[0].rsplit('/', 1)[-1]}"
    return " ".join([exe, *words[1:]])
