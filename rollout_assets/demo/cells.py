"""Writing one cell: everything a supervisor arm leaves behind for one (scenarioId, rep).

OWNS, per cell: its two cost-ledger lines (pending, settled), improve-run/.../cached-result.json,
patches/<run>/<cell>.patch, the run dir (judge.json, brain.jsonl, result.json) and the worker
sessions it adds to the opencode store. The cell's planted cases change what is written here.
"""

from __future__ import annotations

import random
from typing import Any, TextIO

from rollout_assets.demo.files import compact, compact_file, write_file
from rollout_assets.demo.ids import digest
from rollout_assets.demo.opencode_store import SessionWriter
from rollout_assets.demo.plan import Cell, RoundPlan
from rollout_assets.demo.planted import SessionShape, session_shape
from rollout_assets.demo.worker_text import subtask_titles
from rollout_assets.demo.world import OFFICIAL_JUDGE, SECOND, SUPERVISOR_MODEL, iso


def write_cell(
    plan: RoundPlan, cell: Cell, rng: random.Random, store: SessionWriter, ledger: TextIO
) -> None:
    """Write one cell's files and its two cost-ledger lines; add its worker sessions to `store`."""
    call_id = f"call_{digest(plan.tag, cell.cell_id)[:20]}"
    campaign_dir = str(plan.campaign_dir(cell.campaign))
    cell_dir = plan.cell_dir(cell)
    cell_dir.mkdir(parents=True)
    ledger.write(
        compact(_ledger_record(cell, call_id, campaign_dir, "pending", 0, 0, 0.0, cell.start_ms)) + "\n"
    )
    if "errored_cell" in cell.cases:
        # The arm crashed before it produced an artifact: no run dir, no settled receipt.
        write_file(cell_dir / "cached-result.json", compact_file(_errored_cell_record(cell, rng)))
        return
    wall_s = round(rng.uniform(240.0, 1800.0), 3)
    tokens_in, tokens_out = rng.randint(40_000, 900_000), rng.randint(3_000, 60_000)
    cost_usd = round(tokens_in * 3e-6 + tokens_out * 15e-6, 4)
    end_ms = cell.start_ms + int(wall_s * 1000)
    ledger.write(
        compact(
            _ledger_record(cell, call_id, campaign_dir, "settled", tokens_in, tokens_out, cost_usd, end_ms)
        )
        + "\n"
    )
    patch_text = _cell_patch(cell, rng)
    write_file(plan.patch_path(cell), patch_text)
    record = _cell_record(plan, cell, rng, wall_s, tokens_in, tokens_out, cost_usd, patch_text)
    write_file(cell_dir / "cached-result.json", compact_file(record))
    worker_cwds = [plan.worker_cwd(cell, k) for k in range(plan.spec.workers_per_cell)]
    _write_run_dir(plan, cell, rng, record, worker_cwds, end_ms)
    _write_worker_sessions(cell, worker_cwds, store)


def _ledger_record(
    cell: Cell,
    call_id: str,
    campaign_dir: str,
    status: str,
    tokens_in: int,
    tokens_out: int,
    cost_usd: float,
    at_ms: int,
) -> dict[str, Any]:
    return {
        "version": 1,
        "record": {
            "status": status,
            "callId": call_id,
            "channel": "campaign",
            "phase": "arm",
            "actor": "supervisor",
            "model": SUPERVISOR_MODEL,
            "timestamp": iso(at_ms),
            "inputTokens": tokens_in,
            "outputTokens": tokens_out,
            "costUsd": cost_usd,
            "tags": {"runDir": campaign_dir, "cellId": cell.cell_id},
        },
    }


def _errored_cell_record(cell: Cell, rng: random.Random) -> dict[str, Any]:
    return {
        "cellId": cell.cell_id,
        "scenarioId": cell.scenario_id,
        "rep": cell.rep,
        "artifact": None,
        "error": "arm crashed: docker container exited with code 137 (out of memory) during setup",
        "costUsd": round(rng.uniform(0.05, 0.6), 4),
        "seed": rng.randint(1, 2**31 - 1),
        "cached": False,
        "durationMs": rng.randint(20_000, 90_000),
    }


def _cell_record(
    plan: RoundPlan,
    cell: Cell,
    rng: random.Random,
    wall_s: float,
    tokens_in: int,
    tokens_out: int,
    cost_usd: float,
    patch_text: str,
) -> dict[str, Any]:
    resolved: bool | None = rng.random() < 0.45
    verify_pass: bool | None = resolved or rng.random() < 0.2
    judge_scores = None
    if rng.random() < 0.5:
        judge_scores = {OFFICIAL_JUDGE: {"composite": 1.0 if resolved else 0.0}}
    if "composite_judge_score" in cell.cases:
        judge_scores = {OFFICIAL_JUDGE: {"composite": 0.62}}
    if "cell_without_reward" in cell.cases:
        # The judge never returned: no score, and `resolved` is unknown rather than false.
        resolved, verify_pass, judge_scores = None, None, None
    if "duplicate-transcripts" in cell.cases:  # resolved (after the draws): both answers qualify
        resolved, verify_pass, judge_scores = True, True, {OFFICIAL_JUDGE: {"composite": 1.0}}
    spent_tokens = tokens_in + tokens_out
    worker_tok_in = rng.randint(100_000, 2_000_000)
    worker_tok_out = rng.randint(5_000, 80_000)
    cached = rng.random() < 0.2
    record: dict[str, Any] = {
        "cellId": cell.cell_id,
        "scenarioId": cell.scenario_id,
        "rep": cell.rep,
        "artifact": {
            "kind": "swe-arm",
            "iid": cell.scenario_id,
            "commit": cell.commit,
            "resolved": resolved,
            "verifyPass": verify_pass,
            "patchLines": patch_text.count("\n"),
            "wallS": wall_s,
            "spentTokens": spent_tokens,
            "spentUsd": round(cost_usd * rng.uniform(0.85, 1.0), 4),
            "recoveredTokens": spent_tokens + worker_tok_in + worker_tok_out,
            "workerTokIn": worker_tok_in,
            "workerTokOut": worker_tok_out,
            "judgeAttempts": 3 if "cell_without_reward" in cell.cases else rng.randint(1, 2),
            "judgeWallS": round(rng.uniform(20.0, 240.0), 2),
            "runDir": str(plan.run_dir(cell)),
            "patchPath": str(plan.patch_path(cell)),
        },
        "costUsd": cost_usd,
        "tokenUsage": {"input": tokens_in, "output": tokens_out},
        "resolvedModel": f"anthropic/{SUPERVISOR_MODEL}" if rng.random() < 0.6 else SUPERVISOR_MODEL,
        "seed": rng.randint(1, 2**31 - 1),
        "cached": cached,
        "durationMs": rng.randint(30, 400) if cached else int(wall_s * 1000) + rng.randint(5_000, 60_000),
    }
    if judge_scores is not None:
        record["judgeScores"] = judge_scores
    if "error-null" in cell.cases:
        record["error"] = None
    return record


def _cell_patch(cell: Cell, rng: random.Random) -> str:
    path = cell.touched_file
    line = rng.randint(40, 900)
    return (
        f"diff --git a/{path} b/{path}\n"
        f"index {digest(cell.cell_id, 'a')[:7]}..{digest(cell.cell_id, 'b')[:7]} 100644\n"
        f"--- a/{path}\n"
        f"+++ b/{path}\n"
        f"@@ -{line},6 +{line},7 @@\n"
        "     def _resolve(self, value):\n"
        "-        if value is None:\n"
        "-            return self.default\n"
        "+        if value is None or value == ():\n"
        "+            # Empty tuples reach here from the public API since the refactor.\n"
        "+            return self.default\n"
        "         return self._coerce(value)\n"
    )


def _write_run_dir(
    plan: RoundPlan,
    cell: Cell,
    rng: random.Random,
    record: dict[str, Any],
    worker_cwds: list[str],
    end_ms: int,
) -> None:
    run_dir = plan.run_dir(cell)
    run_dir.mkdir(parents=True)
    artifact = record["artifact"]
    if "cell_without_reward" not in cell.cases:
        write_file(run_dir / "judge.json", compact_file(_judge_verdict(cell, artifact)))
    brain = [
        {
            "ts": iso(cell.start_ms + k * 41_000),
            "kind": "request-stats",
            "model": SUPERVISOR_MODEL,
            "inputTokens": rng.randint(3_000, 40_000),
            "outputTokens": rng.randint(100, 3_000),
            "latencyMs": rng.randint(900, 30_000),
        }
        for k in range(2)
    ]
    write_file(run_dir / "brain.jsonl", "".join(compact(line) + "\n" for line in brain))
    if "result-json-missing" in cell.cases:
        return
    if "result-json-corrupt" in cell.cases:
        write_file(run_dir / "result.json", '{"sup_status": "done", "recoveredSpend": {"workerCwds": ["')
        return
    write_file(
        run_dir / "result.json", compact_file(_supervisor_result(cell, rng, artifact, worker_cwds, end_ms))
    )


def _judge_verdict(cell: Cell, artifact: dict[str, Any]) -> dict[str, Any]:
    resolved = artifact["resolved"] is True
    test_name = f"tests/test_{cell.scenario_id.split('__')[0]}.py::test_regression_{cell.scenario_id[-4:]}"
    return {
        "judge": OFFICIAL_JUDGE,
        "instance_id": cell.scenario_id,
        "resolved": resolved,
        "patch_applied": True,
        "tests_status": {
            "FAIL_TO_PASS": {
                "success": [test_name] if resolved else [],
                "failure": [] if resolved else [test_name],
            },
            "PASS_TO_PASS": {"success": ["tests/test_core.py::test_roundtrip"], "failure": []},
        },
        "attempts": artifact["judgeAttempts"],
        "wallS": artifact["judgeWallS"],
    }


def _supervisor_result(
    cell: Cell,
    rng: random.Random,
    artifact: dict[str, Any],
    worker_cwds: list[str],
    end_ms: int,
) -> dict[str, Any]:
    listed: list[Any] = list(worker_cwds)
    if "cwd_listed_twice" in cell.cases:
        listed.append(worker_cwds[0])  # the respawned worker reused its clone
    if "non_string_worker_cwd" in cell.cases:
        listed.insert(1, None)
    running = "sup_status_running" in cell.cases
    workers = len(worker_cwds)
    titles = subtask_titles(workers)
    if "duplicate-transcripts" in cell.cases:
        titles[1] = titles[0]  # the supervisor gave its first subtask to a second worker as well
    return {
        "sup_status": "running" if running else "done",
        "sup_verdict": None if running else ("resolved" if artifact["resolved"] else "unresolved"),
        "spawned": len(listed),
        "workers": workers,
        "settled": max(workers - 1, 0) if running else workers,
        "subtasks": [
            {"id": f"t{k + 1}", "title": title, "status": "done", "worker": cwd.rsplit("/", 1)[-1]}
            for k, (title, cwd) in enumerate(zip(titles, worker_cwds))
        ],
        "recoveredSpend": {
            "workerCwds": listed,
            "tokens": artifact["recoveredTokens"],
            "usd": round(rng.uniform(0.2, 6.0), 4),
        },
        "startedAt": iso(cell.start_ms),
        "endedAt": None if running else iso(end_ms),
    }


def _write_worker_sessions(cell: Cell, worker_cwds: list[str], store: SessionWriter) -> None:
    for k, cwd in enumerate(worker_cwds):
        if "cwd_without_session" in cell.cases and k == len(worker_cwds) - 1:
            continue  # the worker died before opencode created its session
        shape = session_shape(cell.cases, k)
        start = cell.start_ms + 15 * SECOND + k * 20 * SECOND
        session_id = store.add_session(cell, k, cwd, start, shape)
        if k == 0 and "cwd_with_two_sessions" in cell.cases:
            # opencode's task tool runs a sub-agent in the same directory, as a child session.
            store.add_session(cell, k, cwd, start + 45 * SECOND, SessionShape(), parent_id=session_id)
