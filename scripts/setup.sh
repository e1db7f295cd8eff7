#!/usr/bin/env bash
# Create .venv (if missing) and install the project into it; `setup.sh dev` adds the test
# extras (pytest, jsonschema, playwright, the deploy integrations). The demo and the UI need
# only the project itself. Safe to run again (pip only installs what is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version='import sys; print("%d.%d" % sys.version_info[:2])'
if [ -x .venv/bin/python ]; then
  # An existing .venv keeps the interpreter it was made with: a PYTHON asking for another one
  # is refused, not ignored.
  if [ -n "${PYTHON:-}" ]; then
    wanted=$("$PYTHON" -c "$version" 2>/dev/null) || { echo "setup.sh: PYTHON=$PYTHON does not run" >&2; exit 1; }
    made_with=$(.venv/bin/python -c "$version")
    if [ "$made_with" != "$wanted" ]; then
      echo "setup.sh: .venv was made with Python $made_with, not PYTHON=$PYTHON (Python $wanted);" \
        "remove .venv to make it again with $PYTHON" >&2
      exit 1
    fi
  fi
else
  "${PYTHON:-python3}" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
if [ "${1:-}" = "dev" ]; then
  .venv/bin/python -m pip install --quiet -e '.[dev]'
else
  .venv/bin/python -m pip install --quiet -e .
fi
