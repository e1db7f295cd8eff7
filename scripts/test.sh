#!/usr/bin/env bash
# Set up and run the whole test suite (the command CI runs). Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not slow"` for the quick part only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/system-deps.sh
bash scripts/setup.sh dev
# Syntax errors and undefined names first: a second, not minutes into the suite.
.venv/bin/ruff check --quiet rollout_assets rollout_assets_tests bench
exec .venv/bin/python -m pytest "$@"
