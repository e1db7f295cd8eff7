#!/usr/bin/env bash
# The main job on demo data: set up, generate the demo rounds (once), then materialize and
# check every round through Dagster on the persistent instance in .dagster_home.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
source scripts/env.sh
if [ ! -d demo/rounds ]; then
  .venv/bin/rollout-assets demo demo
fi
.venv/bin/rollout-assets materialize
echo
echo "Open the UI on these materializations: bash scripts/ui.sh   (then http://127.0.0.1:3000)"
