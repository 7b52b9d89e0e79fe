#!/usr/bin/env bash
# The wheels scripts/gpu_check.py needs on the GPU machine and does not find there, into .whl/ (git-ignored), for
# that machine's CPython 3.12 on manylinux x86-64. The machine has no package index: the folder travels with the
# working tree (the device tool's `carry: [".whl"]`, 64 MiB with the tree) and scripts/gpu_run.sh installs it there
# without an index (pip install --no-index --no-deps --target /tmp/site .whl/*.whl; docs/gpu_check.md).
#
# What is shipped: the packages the check imports (directly or through the project's modules) that
# requirements/gpu-machine.txt does not list, at the versions requirements/lock-cpu.txt pins (the ones CI tests).
# antlr4-python3-runtime is source-only on PyPI, so its wheel is built here. One version of each; nothing the
# machine already has (a second version on PYTHONPATH would shadow it). Wheels already in .whl/ at the pinned version
# are kept, others removed. Prints the total and fails if the wheels plus the working tree exceed 64 MiB.
#
# Usage: bash scripts/gpu_wheels.sh            (GPU_WHEELS_DIR=/elsewhere to write another folder)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${GPU_WHEELS_DIR:-$ROOT/.whl}
LOCK=$ROOT/requirements/lock-cpu.txt
MACHINE=$ROOT/requirements/gpu-machine.txt
LIMIT_MIB=64
if [[ -n ${PYTHON:-} ]]; then PY=$PYTHON
elif [[ -x $ROOT/.venv/bin/python ]]; then PY=$ROOT/.venv/bin/python
else PY=python3
fi

# diffusers: the transformers and VAEs; hydra-core, omegaconf (+ antlr4, their parser runtime): the project's
# config modules the method benches compose; hydra-submitit-launcher (+ submitit; cloudpickle is there): the config store
# registers cluster=slurm's launcher config, built on its SlurmQueueConf; open_clip_torch (+ ftfy, + wcwidth for
# ftfy): the reward tower.
FROM_PYPI=(diffusers hydra-core omegaconf hydra-submitit-launcher submitit open_clip_torch ftfy wcwidth)
SOURCE_ONLY=(antlr4-python3-runtime)

normalize() { echo "$1" | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/-/g'; }
declare -A LOCKED=()   # normalised name -> the lock's version
while IFS='=' read -r name version; do LOCKED[$name]=$version; done < <(
  awk -F'==' '/^[A-Za-z0-9].*==/ {n = tolower($1); gsub(/[-_.]+/, "-", n); print n "=" $2}' "$LOCK")
pinned() {
  local v=${LOCKED[$(normalize "$1")]:-}
  [[ -n $v ]] || { echo "gpu_wheels: $1 is not pinned in requirements/lock-cpu.txt; pin it there first" >&2; exit 1; }
  echo "$v"
}
wheel_file() {   # the wheel of name==version already in $DEST, if any (wheel names use _ for - and .)
  local stem; stem=$(normalize "$1" | tr '-' '_')
  find "$DEST" -maxdepth 1 -iname "${stem}-${2}-*.whl" -print -quit
}

mkdir -p "$DEST"
# the machine's package names, normalised (PEP 503) in one pass
preinstalled=" $(grep -vE '^(#|$)' "$MACHINE" | sed -E 's/==.*//' | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/-/g' |
                tr '\n' ' ')"
declare -A KEEP=()
for name in "${FROM_PYPI[@]}" "${SOURCE_ONLY[@]}"; do
  if [[ $preinstalled == *" $(normalize "$name") "* ]]; then
    echo "gpu_wheels: $name is preinstalled on the GPU machine (requirements/gpu-machine.txt): shipping it would" \
         "put a second version on PYTHONPATH; drop it from this script" >&2
    exit 1
  fi
  version=$(pinned "$name")
  file=$(wheel_file "$name" "$version")
  if [[ -z $file ]]; then
    if [[ " ${SOURCE_ONLY[*]} " == *" $name "* ]]; then
      echo "[gpu_wheels] building $name==$version (source only on PyPI)" >&2
      "$PY" -m pip wheel -q --no-deps -w "$DEST" "$name==$version"
    else
      echo "[gpu_wheels] downloading $name==$version" >&2
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$DEST" "$name==$version"
    fi
    file=$(wheel_file "$name" "$version")
    [[ -n $file ]] || { echo "gpu_wheels: no wheel of $name==$version appeared in $DEST" >&2; exit 1; }
  fi
  KEEP[$(basename "$file")]=1
done

for file in "$DEST"/*; do          # other versions, sdists, leftovers: one version of each travels
  [[ -n ${KEEP[$(basename "$file")]:-} ]] || { echo "[gpu_wheels] removing $(basename "$file")" >&2; rm -rf "$file"; }
done

wheels=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
# what the device tool sends: tracked files plus untracked ones git does not ignore (.whl/ is ignored: counted above)
tree=$(cd "$ROOT" && { git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null || true; } |
       awk '{s += $1} END {print s + 0}')     # (a tracked file deleted in the tree has no size: skipped)
total=$((wheels + tree))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
echo "[gpu_wheels] ${#KEEP[@]} wheels in $DEST: $(mib "$wheels") MiB; working tree $(mib "$tree") MiB;" \
     "together $(mib "$total") MiB of the $LIMIT_MIB MiB that travel"
ls -1 "$DEST"
if (( total > LIMIT_MIB * 1048576 )); then
  echo "gpu_wheels: wheels + working tree = $(mib "$total") MiB > $LIMIT_MIB MiB: the device tool would refuse the" \
       "call; drop a wheel or untracked files" >&2
  exit 1
fi
