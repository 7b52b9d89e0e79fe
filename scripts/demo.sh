#!/usr/bin/env bash
# Quickstart command 1: create .venv if missing, then run the default training job
# (tiny Flux twin, built-in colour reward, DanceGRPO, CPU). Extra arguments are Hydra overrides.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
exec "$ROOT/.venv/bin/rewardflow" "$@"
