"""Writing one round's outDir, in the fixed order its random values are drawn in.

OWNS the round-level files (improve-run/loop-provenance.json, improve-run/cost-ledger.jsonl and
its torn last line, candidates/<commit10>.patch) and the order of the writers: every cell
(cells.py, which also adds its worker sessions to the opencode store), then every proposer
shot (shots.py). One `random.Random(spec.seed)` feeds them all, so reordering any call
changes every later value.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from rollout_assets.demo.cells import write_cell
from rollout_assets.demo.files import pretty, write_text
from rollout_assets.demo.leaks import round_leaks
from rollout_assets.demo.opencode_store import IdSequence, SessionWriter
from rollout_assets.demo.plan import Campaign, RoundPlan
from rollout_assets.demo.shots import write_shot
from rollout_assets.demo.world import PROPOSER_RECEIPT_MODEL, SUPERVISOR_MODEL, iso


def write_round(plan: RoundPlan, connection: sqlite3.Connection, legacy: bool) -> None:
    """Write the outDir of `plan` and its opencode rows (one transaction) and Claude transcripts."""
    rng = random.Random(plan.spec.seed)
    plan.out_dir.mkdir(parents=True)
    write_text(plan.out_dir / "improve-run" / "loop-provenance.json", pretty(_provenance(plan)))
    store = SessionWriter(
        connection, legacy, IdSequence(plan.tag), rng, plan.spec.steps_per_session, round_leaks(plan.spec)
    )
    ledger_path = plan.out_dir / "improve-run" / "cost-ledger.jsonl"
    for campaign in plan.campaigns:
        (plan.out_dir / "patches" / campaign.run_name).mkdir(parents=True)
    with connection, ledger_path.open("w", encoding="utf-8") as ledger:
        for cell in plan.cells:
            write_cell(plan, cell, rng, store, ledger)
        # A crash mid-append leaves a torn line; readers must skip it.
        ledger.write('{"version":1,"record":{"status":"settled","callId":"call_torn\n')
        store.flush()
    _write_candidate_patches(plan)
    for shot in plan.shots:
        write_shot(plan, shot, rng)


def _provenance(plan: RoundPlan) -> dict[str, Any]:
    spec = plan.spec
    return {
        "runId": plan.run_id,
        "startedAt": iso(plan.start_ms),
        "suite": "swe-bench-verified",
        "split": "search",
        "loopsCommit": plan.campaigns[0].commit,
        "instances": spec.instances,
        "reps": spec.reps,
        "generations": spec.generations,
        "candidatesPerGeneration": spec.candidates_per_generation,
        "proposer": {"harness": "claude-code", "model": PROPOSER_RECEIPT_MODEL},
        "worker": {"harness": "opencode", "model": f"anthropic/{SUPERVISOR_MODEL}"},
        "host": "demo-runner-01",
    }


def _write_candidate_patches(plan: RoundPlan) -> None:
    without = plan.case_shots.get("candidate_without_patch")
    for campaign in plan.campaigns[1:]:
        if without is not None and (campaign.generation, campaign.candidate_index) == (
            without.generation,
            without.candidate_index,
        ):
            continue  # the proposer committed nothing diffable
        write_text(plan.candidate_patch(campaign), _candidate_patch(campaign))


def _candidate_patch(campaign: Campaign) -> str:
    return (
        "diff --git a/profiles/swe/supervisor.md b/profiles/swe/supervisor.md\n"
        f"index {campaign.commit[:7]}..{campaign.commit[-7:]} 100644\n"
        "--- a/profiles/swe/supervisor.md\n"
        "+++ b/profiles/swe/supervisor.md\n"
        "@@ -12,4 +12,6 @@\n"
        " ## Splitting work\n"
        "-Spawn one worker per failing test.\n"
        "+Spawn one worker to reproduce the failure first; spawn fixers only after it\n"
        "+reports the failing assertion.\n"
        f"+Generation {campaign.generation}, candidate {campaign.candidate_index}.\n"
        " Keep patches minimal.\n"
    )
