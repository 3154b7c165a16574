"""The NCCL RAS conversation as one plain function, for a probe to run on another node.

A probe ships this by value (the node may have no verltop), so it uses the standard library only. RAS is
job-wide: the RAS threads of every NCCL process form one network, and any of them answers for all, so one
node's answer covers the job. ``sources/ras.py`` parses what this returns.
"""

from __future__ import annotations


def status(host: str, port: int, timeout_s: float = 5.0, first_reply_s: float = 2.0) -> tuple[str | None, str | None]:
    """``CLIENT PROTOCOL 2`` / ``SET FORMAT json`` / ``STATUS`` at ``host:port`` on this node:
    ``(the report, None)`` or ``(None, what went wrong)``."""
    import socket
    import time

    where = f"{host}:{port}"
    try:
        s = socket.create_connection((host, port), timeout=first_reply_s + 1)
    except ConnectionRefusedError:
        return None, f"no NCCL RAS service at {where} on that node"
    except OSError as e:
        return None, f"no NCCL RAS service at {where} on that node ({e.__class__.__name__})"
    try:
        s.settimeout(first_reply_s)
        f = s.makefile("rb")
        s.sendall(b"CLIENT PROTOCOL 2\n")
        hello = f.readline()
        if not hello.startswith(b"SERVER PROTOCOL"):
            return None, f"NCCL RAS at {where} answered {hello[:60]!r}"
        s.sendall(b"SET FORMAT json\n")
        f.readline()  # "OK", or "ERROR: ..." before 2.28.7 (then the answer is text)
        s.sendall(b"STATUS\n")
        deadline = time.monotonic() + timeout_s
        chunks = []
        while True:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            b = f.read1(65536)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks).decode("utf-8", "replace"), None
    except TimeoutError:
        return None, f"NCCL RAS at {where} did not answer within {timeout_s:g} s (a stopped process holds the port)"
    except OSError as e:
        return None, f"NCCL RAS at {where}: {e.__class__.__name__}: {e}"
    finally:
        s.close()
