#!/bin/bash
# Run ON the lent one-GPU machine, in one `run` call (about 4 minutes), from the repo root:
#   run(command="bash scripts/device_gpu_run.sh", carry=[".devbundle"], timeout_s=560)
# after scripts/build_device_bundle.sh built .devbundle/site.tar.xz here.
#
# Starts a Ray 2.60 head (1 GPU, token auth, RAY_DASHBOARD_ENABLE_PROFILING=1), runs device_gpu_job.py
# (rank 0 waits on its busy GPU after NCCL all_reduces with Flight Recorder on; rank 1 straggles on CPU;
# TaskRunner waits in ray.get), and device_gpu_capture.py (verltop snapshot/dump/--native, the Flight Recorder
# pipe, the TUI headless, raw NVML/nvidia-smi/dashboard/py-spy views, all timed). Everything lands in
# $OUT/capture.tar.gz (+ $OUT/run.log). The Ray token is replaced by REDACTED in every captured file.
#
# VT_WORLD=2 (kind nvidia-h200-x2, about 5 minutes): for each shape in VT_SHAPES (default "straggler mismatch"),
# a fresh Ray head with 2 GPUs, the job with an NCCL group of world size 2 (timeout VT_PG_TIMEOUT_S, default 45)
# hung in that shape, the capture before and after the NCCL timeout (device_gpu_capture.py main_x2), the TUI in
# tmux after it, `ray stop`; each shape lands in $OUT/x2-<shape>.tar.gz. With the default 45 s there is no time
# for the headless TUI before the timeout (the pipe dump of two hung ranks takes ~7 s); VT_PG_TIMEOUT_S=60 fits it.
#   run(command="VT_WORLD=2 bash scripts/device_gpu_run.sh", kind="nvidia-h200-x2", carry=[".devbundle"])
#
# VT_CPU=1: a dry run on a machine without a GPU or bundle (gloo, busy loop; uses the current python3/ray).
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/vt_out}
mkdir -p "$OUT"
WORLD=${VT_WORLD:-1}
rm -rf /tmp/vtcap /tmp/vtcap-x2-* /tmp/fr_rank_* /tmp/fr_pipe_* /tmp/fr_inproc_*
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - T0) / 1000000 )); }
say() { echo "[run +$(ms)ms] $*"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if [ "$WORLD" = 2 ]; then HOLD=${VT_HOLD_S:-180}; else HOLD=${VT_HOLD_S:-220}; fi
PG_TIMEOUT=${VT_PG_TIMEOUT_S:-45}
export VT_WORLD=$WORLD VT_PG_TIMEOUT_S=$PG_TIMEOUT
JOBFLAG=""
if [ "${VT_CPU:-0}" = 1 ]; then
  JOBFLAG=--cpu; NGPU=0
  export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
else
  NGPU=$WORLD
  mkdir -p /tmp/site
  xz -dc -T0 "$REPO/.devbundle/site.tar.xz" | tar -xf - -C /tmp/site || { say "bundle unpack failed"; exit 1; }
  for f in /tmp/site/bin/*; do head -c 3 "$f" | grep -q '^#!' && sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$f"; done
  chmod +x /tmp/site/bin/* 2>/dev/null
  export PYTHONPATH=/tmp/site:$REPO PATH=/tmp/site/bin:$PATH
  say "bundle unpacked ($(du -sm /tmp/site | cut -f1) MB)"
fi
command -v sudo >/dev/null || { mkdir -p /tmp/shim; printf '#!/bin/sh\n[ "$1" = "-n" ] && shift\nexec "$@"\n' > /tmp/shim/sudo; chmod +x /tmp/shim/sudo; export PATH=$PATH:/tmp/shim; SUDO_SHIM=1; }
ENVTXT=/tmp/vt_environment.txt
{
  date -u +%FT%TZ; uname -a; nvidia-smi -L 2>&1; nvidia-smi --query-gpu=index,pci.bus_id,driver_version,name,memory.total --format=csv 2>&1
  nvidia-smi topo -m 2>&1
  python3 -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None, "devices", torch.cuda.device_count())' 2>&1
  python3 -c 'import ray, textual, aiohttp, orjson, psutil; print("ray", ray.__version__, ray.__commit__, "textual", textual.__version__, "aiohttp", aiohttp.__version__, "orjson", orjson.__version__, "psutil", psutil.__version__)' 2>&1
  python3 -c 'import pynvml; print("nvidia-ml-py", getattr(pynvml, "__version__", "?"))' 2>&1
  py-spy --version 2>&1; echo "tmux: $(command -v tmux || echo none)"; nproc; free -g | head -2
  env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort
  (cd "$REPO" && git log -1 --format='verltop commit %H %s' 2>/dev/null; git status --short 2>/dev/null | head -30)
} > $ENVTXT 2>&1
say "environment: $(grep -E '^(ray|torch|python) ' $ENVTXT | tr '\n' ' ')"

export RAY_AUTH_MODE=token RAY_DASHBOARD_ENABLE_PROFILING=1
python3 -c 'import sys; from ray.scripts.scripts import main; sys.argv=["ray","get-auth-token","--generate"]; main()' > /dev/null 2> /tmp/vt_get_auth_token.stderr.txt
say "auth token: $( [ -s ~/.ray/auth_token ] && echo present || echo MISSING)"

stop_own_cluster() {
  python3 - "$1" <<'PY'
import os, signal, sys, time
sess = sys.argv[1]
procs = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")
            ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        procs[int(p)] = (ppid, cmd)
mine = {p for p, (_, cmd) in procs.items() if sess and sess in cmd}
grew = True
while grew:
    more = {p for p, (pp, _) in procs.items() if pp in mine} - mine
    grew, mine = bool(more), mine | more
mine.discard(os.getpid())
print(f"session {sess}: ending {len(mine)} processes {sorted(mine)}")
for sig in (signal.SIGTERM, signal.SIGKILL):
    for p in mine:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    time.sleep(3)
PY
}

if [ "${VT_CPU:-0}" = 1 ] && python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8265), 1)' 2>/dev/null; then
  say "a Ray dashboard already answers on 127.0.0.1:8265 (someone else's cluster?): no dry run here"; exit 1
fi

# one Ray head, one job, one capture, into $1; the job's extra arguments follow
one_run() {
  local W=$1; shift
  mkdir -p "$W"; cp $ENVTXT $W/environment.txt; cp /tmp/vt_get_auth_token.stderr.txt $W/get_auth_token.stderr.txt
  [ "${SUDO_SHIM:-0}" = 1 ] && echo "no sudo: a shim that execs its arguments is on PATH (the dashboard's py-spy calls sudo)" > $W/NOTE_sudo_shim.txt
  rm -f /tmp/fr_rank_* /tmp/fr_pipe_* /tmp/fr_inproc_*
  local t=$(ms)
  timeout 120 ray start --head --num-gpus=$NGPU --num-cpus=8 --include-dashboard=true --dashboard-host=127.0.0.1 \
    --disable-usage-stats --object-store-memory=2000000000 > $W/ray_start.txt 2>&1
  local RC=$?; echo "rc=$RC ms=$(( $(ms) - t ))" >> $W/ray_start.txt; say "ray start rc=$RC in $(( $(ms) - t )) ms"
  SESSION=$(basename "$(readlink -f /tmp/ray/session_latest)")
  if [ $RC = 0 ]; then
    timeout $((HOLD + 200)) python3 "$REPO/scripts/device_gpu_job.py" $W $HOLD $JOBFLAG "$@" > $W/driver.log 2>&1 &
    local DRV=$!
    timeout 420 python3 "$REPO/scripts/device_gpu_capture.py" $W 2>&1 | tee $W/capture.log
    say "capture finished"
    if command -v tmux >/dev/null && [ "${VT_TMUX:-1}" = 1 ]; then
      # the real TUI in a real terminal: main screen, then D (stack screen), then f (Flight Recorder)
      local S=${VT_TMUX_WAIT_S:-9}
      tmux new-session -d -s vt -x 200 -y 45 "python3 -m verltop" && sleep $((S + 1))
      tmux capture-pane -p -t vt > $W/tmux_main.txt 2>&1
      tmux send-keys -t vt D; sleep $S; tmux capture-pane -p -t vt > $W/tmux_stacks.txt 2>&1
      tmux send-keys -t vt f; sleep $S; tmux capture-pane -p -t vt > $W/tmux_stacks_fr.txt 2>&1
      tmux send-keys -t vt Escape; sleep 1; tmux send-keys -t vt q; sleep 2; tmux kill-server 2>/dev/null
      say "tmux captures done"
    fi
    kill $DRV 2>/dev/null
  fi
  mkdir -p $W/logs; local L=/tmp/ray/session_latest/logs; ls -la $L > $W/logs/ls-la.txt 2>&1
  for f in $L/worker-*.err $L/worker-*.out $L/dashboard.log $L/dashboard_agent.log $L/raylet.out; do
    [ -s "$f" ] && tail -c 40000 "$f" > $W/logs/$(basename "$f")
  done
  t=$(ms)
  if [ "${VT_CPU:-0}" = 1 ]; then
    # a dry run shares its machine: end only this cluster's processes (by pid: those naming its session, and
    # their descendants), never `ray stop`, which ends every Ray process there
    stop_own_cluster "$SESSION" > $W/ray_stop.txt 2>&1
  else
    timeout 60 ray stop --force > $W/ray_stop.txt 2>&1
  fi
  echo "rc=$? ms=$(( $(ms) - t ))" >> $W/ray_stop.txt
  python3 - "$W" <<'PY'
import os, sys
p = os.path.expanduser("~/.ray/auth_token")
tok = open(p).read().strip() if os.path.exists(p) else ""
n = 0
if tok:
    for root, _, files in os.walk(sys.argv[1]):
        for f in files:
            fp = os.path.join(root, f)
            b = open(fp, "rb").read()
            if tok.encode() in b:
                open(fp, "wb").write(b.replace(tok.encode(), b"REDACTED")); n += 1
open(os.path.join(sys.argv[1], "token_note.txt"), "w").write(
    f"~/.ray/auth_token existed: {bool(tok)}; length {len(tok)}; replaced by REDACTED in {n} captured files\n")
PY
  find $W -type f -empty -delete
}

if [ "$WORLD" = 2 ]; then
  port=29550
  for shape in ${VT_SHAPES:-straggler mismatch}; do
    port=$((port + 1))
    say "=== shape $shape (NCCL timeout ${PG_TIMEOUT} s, port $port)"
    W=/tmp/vtcap-x2-$shape
    one_run $W --world 2 --shape $shape --timeout $PG_TIMEOUT --port $port
    # the GPUs are free again before the next shape (ray stop --force SIGKILLs the ranks)
    for _ in $(seq 20); do [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && break; sleep 1; done
    tar czf "$OUT/x2-$shape.tar.gz" -C $W .
    say "done $shape: $(du -h "$OUT/x2-$shape.tar.gz" | cut -f1) in $OUT/x2-$shape.tar.gz"
  done
else
  one_run /tmp/vtcap
  tar czf "$OUT/capture.tar.gz" -C /tmp/vtcap .
  say "done: $(du -h "$OUT/capture.tar.gz" | cut -f1) in $OUT/capture.tar.gz"
fi
