#!/bin/bash
# Build what the lent GPU machine lacks to run verltop against a real Ray cluster there:
# ray[default]==2.60.0 and verltop's runtime deps (textual, rich, aiohttp, orjson, py-spy), installed with
# `pip install --target` for CPython 3.12 / manylinux x86_64, stripped, packed to .devbundle/site.tar.xz.
#
# The device machine (Python 3.12, torch, nvidia-ml-py, psutil) reaches no registry; the bundle travels in the
# working tree (64 MiB limit for everything that travels) as an ignored folder named in `carry`:
#   run(command="bash scripts/device_gpu_run.sh", carry=[".devbundle"])
# and is unpacked there to /tmp/site (PYTHONPATH/PATH). verltop itself travels as the repo.
#
# usage: scripts/build_device_bundle.sh [--keep]     (--keep leaves the unpacked tree in .devbundle/site)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=$ROOT/.devbundle
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
grep -qx '/.devbundle/' "$ROOT/.git/info/exclude" 2>/dev/null || { mkdir -p "$ROOT/.git/info"; echo '/.devbundle/' >> "$ROOT/.git/info/exclude"; }

STAGE=$(mktemp -d /tmp/devbundle.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
SITE=$STAGE/site
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
      --platform manylinux_2_5_x86_64 --platform any)
echo "pip install --target (cp312 manylinux x86_64)…" >&2
"$PY" -m pip install -q --no-compile --no-cache-dir --target "$SITE" "${PLAT[@]}" \
  "ray[default]==2.60.0" "textual>=8.0,<9" "rich" "aiohttp>=3.9" "orjson>=3.9" "py-spy>=0.4.0"

# What verltop's device run never touches (recipe of tests/fixtures/real-gpu/README.md, "Carried software").
rm -rf "$SITE"/ray/rllib "$SITE"/ray/data "$SITE"/ray/llm "$SITE"/ray/serve/llm "$SITE"/ray/jars
find "$SITE" -type d \( -name tests -o -name __pycache__ \) -prune -exec rm -rf {} +
find "$SITE" -name '*.js.map' -delete
# The device's own numpy/torch stack must win: never shadow it from the bundle.
rm -rf "$SITE"/numpy "$SITE"/numpy-*.dist-info "$SITE"/numpy.libs
# Console scripts: pip wrote this machine's interpreter into the shebangs; the device fixes them on unpack.
unpacked=$(du -sm "$SITE" | cut -f1)

mkdir -p "$OUTDIR"
echo "packing ${unpacked} MB…" >&2
tar -C "$SITE" -cf - . | xz -T0 -9e > "$OUTDIR/site.tar.xz.tmp"
mv "$OUTDIR/site.tar.xz.tmp" "$OUTDIR/site.tar.xz"
if [ "${1:-}" = "--keep" ]; then rm -rf "$OUTDIR/site"; cp -a "$SITE" "$OUTDIR/site"; fi
"$PY" - "$SITE" > "$OUTDIR/versions.txt" <<'PY'
import os, sys
site = sys.argv[1]
for d in sorted(os.listdir(site)):
    if d.endswith(".dist-info"):
        print(d[: -len(".dist-info")])
PY
packed=$(du -m "$OUTDIR/site.tar.xz" | cut -f1)
travel=$(cd "$ROOT" && { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cm --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "bundle: $OUTDIR/site.tar.xz ${packed} MB packed, ${unpacked} MB unpacked; working tree that travels ${travel} MB + bundle" >&2
if [ $((packed + travel)) -ge 63 ]; then echo "WARNING: over the 64 MiB that travels to the device" >&2; exit 1; fi
