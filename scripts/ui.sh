#!/usr/bin/env bash
# The Dagster UI (webserver + daemon, sensor on) on the demo's instance, bound to 127.0.0.1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x .venv/bin/dagster ] || bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/dagster dev -h 127.0.0.1 -p "${PORT:-3000}" -w workspace.yaml
