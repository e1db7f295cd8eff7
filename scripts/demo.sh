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
# A releasable dataset of the demo's rounds: scrubbed, split by instance, with its card.
.venv/bin/rollout-assets release "$ROLLOUT_LEDGER_ROOT" "$PWD/demo/releases" --license cc-by-4.0 --name demo-dataset
echo
echo "Open the UI on these materializations: bash scripts/ui.sh   (then http://127.0.0.1:3000)"
echo "Read every transcript of these rounds in Inspect's log viewer: bash scripts/view.sh   (then http://127.0.0.1:7575)"
