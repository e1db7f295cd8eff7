#!/usr/bin/env bash
# Inspect's log viewer on the demo's rounds, bound to 127.0.0.1: every ledger line a sample, with
# its transcript. Writes the Inspect logs of rounds that have none or whose ledger changed since.
# `PORT=7576` picks another port; an argument (a ledger, a round's folder) shows that instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x .venv/bin/inspect ] || bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/rollout-assets view "${1:-$ROLLOUT_LEDGER_ROOT}" --port "${PORT:-7575}"
