#!/usr/bin/env bash
# The GPU check's one device command: installs the carried wheels (.whl/, made here by scripts/gpu_wheels.sh) into
# a folder on PYTHONPATH without a package index, then runs scripts/gpu_check.py with the arguments given, its output
# also written to $OUT/gpu_check.log when $OUT is set (the device tool brings $OUT back). docs/gpu_check.md.
#
#   bash scripts/gpu_run.sh                  # on the GPU machine: ~8 min
#   bash scripts/gpu_run.sh --cpu-smoke      # what tests/test_gpu_check.py rehearses, with a GPU-like venv's python3
#
# python3 is the one on PATH (the GPU machine's, with torch); GPU_SITE (default /tmp/site) is where the wheels go.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SITE=${GPU_SITE:-/tmp/site}
shopt -s nullglob
wheels=("$ROOT"/.whl/*.whl)
if (( ${#wheels[@]} == 0 )); then
  echo "gpu_run: no wheels in $ROOT/.whl: run 'bash scripts/gpu_wheels.sh' on the development machine and carry" \
       ".whl with the device command (carry: [\".whl\"])" >&2
  exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "${wheels[@]}"
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
cd "$ROOT"
if [[ -n ${OUT:-} ]]; then
  set -o pipefail
  python3 scripts/gpu_check.py "$@" 2>&1 | tee "$OUT/gpu_check.log"
else
  exec python3 scripts/gpu_check.py "$@"
fi
