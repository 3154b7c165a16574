#!/bin/bash
# Run ON the lent one-GPU machine, from the repo root (about 3 minutes):
#   run(command="bash scripts/device_tree_run.sh", carry=[".devbundle"], timeout_s=540)
# after scripts/build_device_bundle.sh built .devbundle/site.tar.xz here and setproctitle's cp312 wheel was put
# in .devbundle/ (pip download setproctitle --only-binary=:all: --python-version 3.12 --platform
# manylinux_2_28_x86_64 -d .devbundle). Starts a Ray head with the GPU, runs scripts/device_tree_job.py (a
# vLLM-shaped server whose TP workers hold GPU memory; then SIGKILLed), captures verltop's JSON, the dashboard's
# answers and the TUI in tmux; everything lands in $OUT/tree-capture.tar.gz (+ $OUT/tree-run.log).
set -u
REPO=$(pwd)
OUT=${OUT:-/tmp/vt_out}
W=/tmp/vttree
mkdir -p "$OUT" /tmp/site "$W"
exec > >(tee "$OUT/tree-run.log") 2>&1
xz -dc -T0 .devbundle/site.tar.xz | tar -xf - -C /tmp/site || { echo "bundle unpack failed"; exit 1; }
for w in .devbundle/setproctitle-*.whl; do python3 -m zipfile -e "$w" /tmp/site; done
for f in /tmp/site/bin/*; do head -c 3 "$f" | grep -q '^#!' && sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$f"; done
chmod +x /tmp/site/bin/* 2>/dev/null
export PYTHONPATH=/tmp/site:$REPO PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export RAY_AUTH_MODE=token RAY_DASHBOARD_ENABLE_PROFILING=1 VERLTOP_DEMO_GPU_MB=${VERLTOP_DEMO_GPU_MB:-2048}
command -v sudo >/dev/null || { mkdir -p /tmp/shim; printf '#!/bin/sh\n[ "$1" = "-n" ] && shift\nexec "$@"\n' > /tmp/shim/sudo; chmod +x /tmp/shim/sudo; export PATH=$PATH:/tmp/shim; }
{ nvidia-smi -L; python3 -c 'import sys, torch, ray, setproctitle; print(sys.version.split()[0], torch.__version__, ray.__version__, setproctitle.__version__)'; } > $W/environment.txt 2>&1
cat $W/environment.txt
python3 -c 'import sys; from ray.scripts.scripts import main; sys.argv=["ray","get-auth-token","--generate"]; main()' > /dev/null 2>&1
timeout 120 ray start --head --num-gpus=1 --num-cpus=8 --include-dashboard=true --dashboard-host=127.0.0.1 \
  --disable-usage-stats --object-store-memory=2000000000 > $W/ray_start.txt 2>&1 || { cat $W/ray_start.txt; exit 1; }
timeout 420 python3 scripts/device_tree_job.py $W > $W/job.log 2>&1 &
JOB=$!
for i in $(seq 240); do [ -e $W/ready_for_tui ] && break; sleep 1; done
if command -v tmux >/dev/null; then
  tmux new-session -d -s vt -x 200 -y 40 "python3 -m verltop --address http://127.0.0.1:8265" && sleep 10
  tmux capture-pane -p -t vt > $W/tmux_tree.txt 2>&1; tmux kill-session -t vt
else echo "no tmux" > $W/tmux_tree.txt; fi
touch $W/tui_done
for i in $(seq 120); do [ -e $W/ready_for_tui2 ] && break; sleep 1; done
if command -v tmux >/dev/null; then
  tmux new-session -d -s vt -x 200 -y 40 "python3 -m verltop --address http://127.0.0.1:8265" && sleep 10
  tmux capture-pane -p -t vt > $W/tmux_orphans.txt 2>&1; tmux kill-session -t vt
fi
touch $W/tui2_done
wait $JOB; echo "job rc=$?"
cat $W/job.log
ray stop --force > /dev/null 2>&1
sed -i "s/$(cat ~/.ray/auth_token 2>/dev/null || echo NO-TOKEN)/REDACTED/g" $W/*.json $W/*.txt 2>/dev/null
tar czf $OUT/tree-capture.tar.gz -C /tmp vttree
echo done
