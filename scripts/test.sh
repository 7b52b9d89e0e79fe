#!/usr/bin/env bash
# Quickstart command 2: create .venv if missing, then run the whole test suite.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not slow"`).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_SILENT=true
unset WANDB_API_KEY   # tests never talk to wandb.ai
exec "$ROOT/.venv/bin/python" -m pytest tests "$@"
