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
# VT_CPU=1: a dry run on a machine without a GPU or bundle (gloo, busy loop; uses the current python3/ray).
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/vt_out}
mkdir -p "$OUT"
W=/tmp/vtcap
rm -rf "$W" /tmp/fr_rank_* /tmp/fr_pipe_* /tmp/fr_inproc_*
mkdir -p "$W"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - T0) / 1000000 )); }
say() { echo "[run +$(ms)ms] $*"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
HOLD=${VT_HOLD_S:-220}
JOBFLAG=""
if [ "${VT_CPU:-0}" = 1 ]; then
  JOBFLAG=--cpu; NGPU=0
  export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
else
  NGPU=1
  mkdir -p /tmp/site
  xz -dc -T0 "$REPO/.devbundle/site.tar.xz" | tar -xf - -C /tmp/site || { say "bundle unpack failed"; exit 1; }
  for f in /tmp/site/bin/*; do head -c 3 "$f" | grep -q '^#!' && sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$f"; done
  chmod +x /tmp/site/bin/* 2>/dev/null
  export PYTHONPATH=/tmp/site:$REPO PATH=/tmp/site/bin:$PATH
  say "bundle unpacked ($(du -sm /tmp/site | cut -f1) MB)"
fi
command -v sudo >/dev/null || { mkdir -p /tmp/shim; printf '#!/bin/sh\n[ "$1" = "-n" ] && shift\nexec "$@"\n' > /tmp/shim/sudo; chmod +x /tmp/shim/sudo; export PATH=$PATH:/tmp/shim; echo "no sudo: a shim that execs its arguments is on PATH (the dashboard's py-spy calls sudo)" > $W/NOTE_sudo_shim.txt; }
{
  date -u +%FT%TZ; uname -a; nvidia-smi -L 2>&1; nvidia-smi --query-gpu=driver_version,name,memory.total --format=csv 2>&1
  python3 -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)' 2>&1
  python3 -c 'import ray, textual, aiohttp, orjson, psutil; print("ray", ray.__version__, ray.__commit__, "textual", textual.__version__, "aiohttp", aiohttp.__version__, "orjson", orjson.__version__, "psutil", psutil.__version__)' 2>&1
  python3 -c 'import pynvml; print("nvidia-ml-py", getattr(pynvml, "__version__", "?"))' 2>&1
  py-spy --version 2>&1; echo "tmux: $(command -v tmux || echo none)"; nproc; free -g | head -2
  (cd "$REPO" && git log -1 --format='verltop commit %H %s' 2>/dev/null; git status --short 2>/dev/null | head -30)
} > $W/environment.txt 2>&1
say "environment: $(grep -E '^(ray|torch|python) ' $W/environment.txt | tr '\n' ' ')"

export RAY_AUTH_MODE=token RAY_DASHBOARD_ENABLE_PROFILING=1
python3 -c 'import sys; from ray.scripts.scripts import main; sys.argv=["ray","get-auth-token","--generate"]; main()' > /dev/null 2> $W/get_auth_token.stderr.txt
say "auth token: $( [ -s ~/.ray/auth_token ] && echo present || echo MISSING)"
t=$(ms)
timeout 120 ray start --head --num-gpus=$NGPU --num-cpus=8 --include-dashboard=true --dashboard-host=127.0.0.1 \
  --disable-usage-stats --object-store-memory=2000000000 > $W/ray_start.txt 2>&1
RC=$?; echo "rc=$RC ms=$(( $(ms) - t ))" >> $W/ray_start.txt; say "ray start rc=$RC in $(( $(ms) - t )) ms"
if [ $RC = 0 ]; then
  timeout $((HOLD + 200)) python3 "$REPO/scripts/device_gpu_job.py" $W $HOLD $JOBFLAG > $W/driver.log 2>&1 &
  DRV=$!
  timeout 420 python3 "$REPO/scripts/device_gpu_capture.py" $W 2>&1 | tee $W/capture.log
  say "capture finished"
  if command -v tmux >/dev/null; then
    # the real TUI in a real terminal: main screen, then D (stack screen), then f (Flight Recorder)
    tmux new-session -d -s vt -x 200 -y 45 "python3 -m verltop" && sleep 10
    tmux capture-pane -p -t vt > $W/tmux_main.txt 2>&1
    tmux send-keys -t vt D; sleep 9; tmux capture-pane -p -t vt > $W/tmux_stacks.txt 2>&1
    tmux send-keys -t vt f; sleep 9; tmux capture-pane -p -t vt > $W/tmux_stacks_fr.txt 2>&1
    tmux send-keys -t vt Escape; sleep 1; tmux send-keys -t vt q; sleep 2; tmux kill-server 2>/dev/null
    say "tmux captures done"
  fi
  kill $DRV 2>/dev/null
fi
mkdir -p $W/logs; L=/tmp/ray/session_latest/logs; ls -la $L > $W/logs/ls-la.txt 2>&1
for f in $L/worker-*.err $L/worker-*.out $L/dashboard.log $L/dashboard_agent.log $L/raylet.out; do
  [ -s "$f" ] && tail -c 40000 "$f" > $W/logs/$(basename "$f")
done
t=$(ms); timeout 60 ray stop --force > $W/ray_stop.txt 2>&1; echo "rc=$? ms=$(( $(ms) - t ))" >> $W/ray_stop.txt
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
tar czf "$OUT/capture.tar.gz" -C $W .
say "done: $(du -h "$OUT/capture.tar.gz" | cut -f1) in $OUT/capture.tar.gz"
