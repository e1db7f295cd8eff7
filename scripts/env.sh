#!/usr/bin/env bash
# The demo's environment: a persistent Dagster instance in the project folder and the
# demo data under ./demo. Sourced by demo.sh and ui.sh, so both see the same instance.
# Set unconditionally: values already exported for your own rounds must not point the demo
# at them (nor its ledgers into ./ledgers, the default ledger root).
PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export DAGSTER_HOME="$PROJECT_DIR/.dagster_home"
export ROLLOUT_ROUNDS_ROOT="$PROJECT_DIR/demo/rounds"
export OPENCODE_DB="$PROJECT_DIR/demo/opencode.db"
export CLAUDE_PROJECTS_DIR="$PROJECT_DIR/demo/claude-projects"
export ROLLOUT_LEDGER_ROOT="$PROJECT_DIR/demo/ledgers"
mkdir -p "$DAGSTER_HOME"
# The shipped instance configuration: SQLite storage, telemetry off, one run per round at a time.
cp "$PROJECT_DIR/deploy/local/dagster.yaml" "$DAGSTER_HOME/dagster.yaml"
