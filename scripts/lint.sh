#!/usr/bin/env bash
# Lint and types (CI runs this before the tests): ruff's lint rules and format check over the repository, then mypy
# over the packages (settings in pyproject.toml). Takes seconds once .venv exists.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
