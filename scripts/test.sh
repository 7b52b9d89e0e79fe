#!/usr/bin/env bash
# Quickstart command 2: create .venv if missing, then run the whole test suite.
# Where it can (root + apt-get), it also starts the two-node SLURM cluster the SLURM tests use and stops it when
# the tests end; elsewhere those tests skip with the reason. Extra arguments go to pytest (e.g. -m "not slow").
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_SILENT=true
unset WANDB_API_KEY   # tests never talk to wandb.ai

if [[ ${REWARDFLOW_SLURM:-auto} != 0 && $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  # two compute nodes (network namespaces; the multi-node tests need them), or one where namespaces cannot be made;
  # 4 advertised CPUs per node let two 2-rank jobs run side by side on 2 cores
  export SLURM_CI_CPUS=${SLURM_CI_CPUS:-4}
  trap 'bash "$ROOT/scripts/slurm_cluster.sh" down' EXIT     # also after a failed start: nothing is left behind
  if ! bash scripts/slurm_cluster.sh up; then
    echo "[test] could not start a two-node SLURM cluster; trying one node (multi-node tests will skip)" >&2
    SLURM_CI_NODES=1 bash scripts/slurm_cluster.sh up || echo "[test] no SLURM cluster; SLURM tests will skip" >&2
  fi
fi
"$ROOT/.venv/bin/python" -m pytest tests "$@"
