#!/usr/bin/env bash
# The test suite: lint, types, then pytest (Docker tests fail, not skip, under CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== ruff"; .venv/bin/ruff check testbed harness nemesis workloads checker broker_impl tests bench
echo "== ruff format --check"; .venv/bin/ruff format --check testbed harness nemesis workloads checker broker_impl tests bench
echo "== mypy --strict"; .venv/bin/mypy
echo "== pytest"; exec .venv/bin/pytest -q "$@"
