"""The demo reward loop's sandbox: runs one response's "program" in a fresh interpreter and prints the verdict.

    python -I -S sandbox.py < job.json

Started by ``RewardLoopWorker`` (``rollout.py``) as a child process per score, as verl's ``prime_code`` runs a
response's test cases in a child process. Stdlib only (run with ``-I -S``: nothing of the job is importable).
With ``"hang"`` in the job it never returns until the demo's release file appears — a sandbox call that
never comes back.
"""

import json
import os
import sys
import time


def main() -> int:
    job = json.loads(sys.stdin.read())
    if job.get("hang"):
        with open(job["hung"], "w") as f:
            f.write(json.dumps({"step": job["step"], "rank": 0, "pid": os.getpid(), "since": time.time(),
                                "target": "sandbox"}))
        while not os.path.exists(job["release"]):
            time.sleep(0.5)
        os.unlink(job["release"])
        os.unlink(job["hung"])
    time.sleep(job["run_s"])  # the program under test runs
    print(json.dumps({"passed": job["tokens"] % 3 != 0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
