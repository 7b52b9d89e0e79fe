#!/usr/bin/env bash
# Create (or refresh) .venv at the repository root from requirements/lock-cpu.txt.
# Idempotent: does nothing when .venv already matches the lock (hash stamp).
# Usage: bash scripts/bootstrap.sh        (called by scripts/demo.sh and scripts/test.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
LOCK="$ROOT/requirements/lock-cpu.txt"
PY=${PYTHON:-python3}
STAMP="$VENV/.rewardflow-lock"
want=$(cat "$LOCK" "$ROOT/pyproject.toml" "$ROOT/setup.py" | sha256sum | cut -d' ' -f1)   # setup.py: the editable mapping

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi
if ! "$PY" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 13) else 1)'; then
  echo "rewardflow needs Python 3.11 or 3.12 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
echo "[bootstrap] creating $VENV from $(basename "$LOCK") (first time: ~2 min)" >&2
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install -q -r "$LOCK"
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$ROOT" 2>/dev/null \
  || "$VENV/bin/python" -m pip install -q --no-deps -e "$ROOT"
echo "$want" > "$STAMP"
echo "[bootstrap] ready: $VENV" >&2
