"""A real TCP server speaking NCCL RAS's client protocol (as observed on NCCL 2.28.9) with the answers a real
hung job gave (tests/fixtures/ras/run1/queries.json: the exact bytes of each query's transcript).

It can also hold a *frozen* listener: a second socket on the same port (SO_REUSEPORT, as every NCCL process
of a node binds it) that never accepts — what a SIGSTOPped rank does to half of the connections.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

RUN1 = Path(__file__).parent / "fixtures" / "ras" / "run1"


def captured(label: str) -> str:
    """The report bytes the real RAS thread sent for the query ``label`` (JSON or text)."""
    q = next(x for x in json.loads((RUN1 / "queries.json").read_text()) if x["label"] == label)
    t = q["transcript"]
    status = max(i for i, x in enumerate(t) if x["dir"] == "send" and x["data"].strip().upper().endswith("STATUS"))
    return "".join(x["data"] for x in t[status + 1 :] if x["dir"] == "recv")  # text comes in several chunks


class RasServer:
    """Serves ``reports[fmt]`` on STATUS; ``json_ok=False`` answers SET FORMAT json like NCCL < 2.28.7."""

    def __init__(self, reports: dict[str, str], json_ok: bool = True, port: int = 0) -> None:
        self.reports = reports
        self.json_ok = json_ok
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.frozen: socket.socket | None = None
        self.queries = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def freeze_half(self) -> None:
        """A second listener on the port that never accepts (a stopped process keeps its socket)."""
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        self.frozen = s

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        fmt = "text"
        f = conn.makefile("rb")
        try:
            for raw in f:
                cmd = raw.decode().strip()
                up = cmd.upper()
                if up.startswith("CLIENT PROTOCOL"):
                    conn.sendall(b"SERVER PROTOCOL 2\n")
                elif up.startswith("SET FORMAT"):
                    want = cmd.split()[-1].lower()
                    if want == "json" and not self.json_ok:
                        conn.sendall(b"ERROR: Unknown command SET\n")
                    elif want in ("json", "text"):
                        fmt = want
                        conn.sendall(b"OK\n")
                    else:
                        conn.sendall(f"ERROR: Invalid format {want}\n".encode())
                elif up in ("STATUS", "VERBOSE STATUS"):
                    self.queries += 1
                    conn.sendall(self.reports[fmt].encode())
                    return
                else:
                    conn.sendall(f"ERROR: Unknown command {cmd}\n".encode())
        finally:
            f.close()
            conn.close()

    def close(self) -> None:
        self._stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in the serving thread
        except OSError:
            pass
        self.sock.close()
        self._thread.join(5)
        if self.frozen is not None:
            self.frozen.close()

    def __enter__(self) -> RasServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
