#!/usr/bin/env bash
# Create .venv (if missing) and install the project into it; `setup.sh dev` adds the test
# extras (pytest, jsonschema, playwright, the deploy integrations). The demo and the UI need
# only the project itself. Safe to run again (pip only installs what is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
if [ "${1:-}" = "dev" ]; then
  .venv/bin/python -m pip install --quiet -e '.[dev]'
else
  .venv/bin/python -m pip install --quiet -e .
fi
