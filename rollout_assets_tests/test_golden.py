"""Golden test: the exact ledger and stats of one small generated round.

The round (`GOLDEN_SPEC`: 2 instances x 1 rep, a baseline and one candidate, one worker per
cell with one step, one proposer shot) holds every role. Its lines were checked field by field
against docs/line-format.md and the seed before they were stored, and the most important fields are
asserted explicitly below, from the round's own files and the opencode store, so the golden is
not merely "whatever the code printed". The stored file differs from the real ledger in three
ways only, all made by `normalized_ledger`: `captured_at` is fixed (passed to RoundBackfill),
the demo root path is `<ROOT>` and its Claude project slug `<ROOT-SLUG>` (the root is a pytest
temp folder), and each worker `rollout_id`, which hashes the root-dependent worker cwd, is
replaced by `<uuid5 NAME>` after it was checked to equal uuid5 of NAME.

To regenerate after an INTENTIONAL change of the line format, the join or the demo generator:
run `UPDATE_GOLDEN=1 .venv/bin/python -m pytest rollout_assets_tests/test_golden.py -q`, which
rewrites `golden/golden_round.jsonl` and `golden/golden_round.stats.json`; then review the diff
line by line (`git diff rollout_assets_tests/golden/`) against docs/line-format.md before committing
it, and update the explicit assertions below if the change touches them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.demo import DemoLayout, RoundSpec, write_demo
from rollout_assets.ledger import write_ledger
from rollout_assets_tests.backfill_runs import (
    SUPERVISOR_GAP,
    Backfilled,
    backfill,
    claude_usage_once_per_message,
    rollout_uuid,
    session_rows,
)

GOLDEN_SPEC = RoundSpec(
    name="golden",
    instances=2,
    reps=1,
    generations=1,
    candidates_per_generation=1,
    workers_per_cell=1,
    steps_per_session=1,
    shots_per_candidate=1,
    edge_cases=False,
    # Picked for variety: composite and boolean rewards, a bare resolvedModel, two worker
    # models, a step with and one without reasoning, and a resolved fraction of 1/2.
    seed=18,
)
GOLDEN_CAPTURED_AT = "2026-12-01T12:00:00.000Z"
GOLDEN_DIR = Path(__file__).parent / "golden"
GOLDEN_LEDGER = GOLDEN_DIR / "golden_round.jsonl"
GOLDEN_STATS = GOLDEN_DIR / "golden_round.stats.json"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_demo(tmp_path_factory.mktemp("golden-root"), rounds=[GOLDEN_SPEC])


@pytest.fixture(scope="module")
def run(demo: DemoLayout) -> Backfilled:
    return backfill(
        demo.rounds[0],
        opencode_db=demo.opencode_db,
        claude_projects_dir=demo.claude_projects_dir,
        captured_at=GOLDEN_CAPTURED_AT,
    )


def claude_slug(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", path)


def normalized_ledger(run: Backfilled, root: Path, ledger_path: Path) -> str:
    """The ledger file as written, with the root-dependent parts replaced (see module docstring)."""
    write_ledger(ledger_path, run.lines)
    normalized = []
    for raw in ledger_path.read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        if line["role"] == "worker":
            ref = line["artifacts"]["transcript_ref"]
            session = "-" if ref is None else ref.removeprefix("opencode:")
            name = f"{line['parent_rollout_id']}|{line['outcome']['metrics']['worker_cwd']}|{session}"
            assert line["rollout_id"] == rollout_uuid(name)
            line["rollout_id"] = f"<uuid5 {name}>"
        normalized.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    text = "".join(normalized)
    return text.replace(str(root), "<ROOT>").replace(claude_slug(str(root)), "<ROOT-SLUG>")


def stats_text(run: Backfilled) -> str:
    return json.dumps(run.stats.to_json(), indent=2, ensure_ascii=False) + "\n"


def cell_record(out_dir: Path, campaign: str, scenario_id: str) -> dict[str, Any]:
    return json.loads(
        (out_dir / "improve-run" / campaign / f"{scenario_id}__rep0" / "cached-result.json").read_text()
    )


# ---------------------------------------------------------------------------
# The golden files
# ---------------------------------------------------------------------------


def test_the_ledger_equals_the_golden_file(run: Backfilled, demo: DemoLayout, tmp_path: Path) -> None:
    actual = normalized_ledger(run, demo.root, tmp_path / "ledger.jsonl")
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        GOLDEN_LEDGER.write_text(actual, encoding="utf-8")

    expected = GOLDEN_LEDGER.read_text(encoding="utf-8")

    assert actual.splitlines() == expected.splitlines()
    assert actual == expected


def test_the_stats_equal_the_golden_file(run: Backfilled) -> None:
    actual = stats_text(run)
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        GOLDEN_STATS.write_text(actual, encoding="utf-8")

    assert json.loads(actual) == json.loads(GOLDEN_STATS.read_text(encoding="utf-8"))
    assert actual == GOLDEN_STATS.read_text(encoding="utf-8")


def test_the_golden_file_holds_no_machine_specific_path() -> None:
    text = GOLDEN_LEDGER.read_text(encoding="utf-8")

    assert "/tmp" not in text and "pytest-of-" not in text
    assert text.count("\n") == 10


# ---------------------------------------------------------------------------
# Explicit checks of the most important fields (verified by hand against the spec)
# ---------------------------------------------------------------------------


def test_lines_come_in_ledger_order(run: Backfilled) -> None:
    assert [(line["role"], line["candidate_id"], line["task"]["instance_id"]) for line in run.lines] == [
        ("supervisor", "baseline", "astropy__astropy-12907"),
        ("worker", "baseline", "astropy__astropy-12907"),
        ("supervisor", "baseline", "django__django-11532"),
        ("worker", "baseline", "django__django-11532"),
        ("supervisor", "gen0-cand0", "astropy__astropy-12907"),
        ("worker", "gen0-cand0", "astropy__astropy-12907"),
        ("supervisor", "gen0-cand0", "django__django-11532"),
        ("worker", "gen0-cand0", "django__django-11532"),
        ("proposer", "gen0-cand0", "gen0-cand0"),
        # The proposer's transcript holds one inline (isSidechain) sub-agent conversation.
        ("agent", "gen0-cand0", "gen0-cand0"),
    ]
    assert [(line["generation"], line["candidate_index"]) for line in run.lines] == [(-1, -1)] * 4 + [
        (0, 0)
    ] * 6


def test_ids_are_the_uuid5_values_of_the_spec(run: Backfilled) -> None:
    supervisors = run.role("supervisor")

    assert [line["rollout_id"] for line in supervisors] == [
        rollout_uuid("improve-golden|supervisor|baseline|astropy__astropy-12907|0"),
        rollout_uuid("improve-golden|supervisor|baseline|django__django-11532|0"),
        rollout_uuid("improve-golden|supervisor|gen0-cand0|astropy__astropy-12907|0"),
        rollout_uuid("improve-golden|supervisor|gen0-cand0|django__django-11532|0"),
    ]
    assert supervisors[0]["rollout_id"] == "bffed8a6-3191-592d-bd59-a56bc5e0078b"
    assert [line["parent_rollout_id"] for line in run.role("worker")] == [
        s["rollout_id"] for s in supervisors
    ]
    assert run.role("proposer")[0]["rollout_id"] == rollout_uuid(
        "improve-golden|proposer|proposer-shots/gen0-cand0-shot0.json"
    )
    assert [line["parent_rollout_id"] for line in supervisors + run.role("proposer")] == [None] * 5


def test_rewards_and_their_sources(run: Backfilled) -> None:
    out_dir = run.out_dir
    # The baseline astropy and candidate django cells carry a composite of 0.0; the other two
    # only a boolean `resolved` (true).
    assert cell_record(out_dir, "baseline", "astropy__astropy-12907")["judgeScores"] == {
        "swe-arena-official-judge": {"composite": 0.0}
    }
    assert "judgeScores" not in cell_record(out_dir, "baseline", "django__django-11532")

    assert [(s["outcome"]["reward"], s["outcome"]["reward_source"]) for s in run.role("supervisor")] == [
        (0.0, "swe-arena-official-judge"),
        (1, "swe-arena-official-judge"),
        (1, "swe-arena-official-judge"),
        (0.0, "swe-arena-official-judge"),
    ]
    assert [(w["outcome"]["reward"], w["outcome"]["reward_source"]) for w in run.role("worker")] == [
        (0.0, "swe-arena-official-judge/inherited"),
        (1, "swe-arena-official-judge/inherited"),
        (1, "swe-arena-official-judge/inherited"),
        (0.0, "swe-arena-official-judge/inherited"),
    ]
    proposer = run.role("proposer")[0]
    assert (proposer["outcome"]["reward"], proposer["outcome"]["reward_source"]) == (
        0.5,
        "swe-arena-official-judge/candidate-resolved-fraction",
    )
    assert (
        proposer["outcome"]["metrics"]["resolved_count"],
        proposer["outcome"]["metrics"]["instance_count"],
    ) == (
        1,
        2,
    )


def test_gaps_only_on_supervisor_lines(run: Backfilled) -> None:
    assert [line["provenance"].get("gap") for line in run.lines] == [
        SUPERVISOR_GAP,
        None,
        SUPERVISOR_GAP,
        None,
        SUPERVISOR_GAP,
        None,
        SUPERVISOR_GAP,
        None,
        None,
        None,
    ]
    # The sub-agent's 2 messages (its task, its answer) are no longer in the proposer's 10.
    assert [len(line["messages"]) for line in run.lines] == [0, 3, 0, 3, 0, 3, 0, 3, 10, 2]


def test_metrics_keys_per_role(run: Backfilled) -> None:
    keys = {line["role"]: list(line["outcome"]["metrics"]) for line in run.lines}

    assert keys == {
        "supervisor": [
            "resolved",
            "verify_pass",
            "patch_lines",
            "judge_attempts",
            "judge_wall_s",
            "spent_tokens",
            "spent_usd",
            "recovered_tokens",
            "sup_status",
            "sup_verdict",
            "spawned",
            "workers",
            "settled",
            "subtasks",
            "cached",
        ],
        "worker": ["worker_cwd", "session_agent", "session_parent_id", "has_session"],
        "proposer": [
            "resolved_count",
            "instance_count",
            "exit_code",
            "timed_out",
            "author",
            "max_shots",
            "prompt_sha256",
        ],
        "agent": ["agent_key", "started_at", "ended_at"],
    }


def test_supervisor_cost_task_and_policy_come_from_the_cell(run: Backfilled) -> None:
    for supervisor in run.role("supervisor"):
        campaign = "baseline" if supervisor["candidate_id"] == "baseline" else "gen-0/candidate-0"
        record = cell_record(run.out_dir, campaign, supervisor["task"]["instance_id"])
        assert supervisor["cost"] == {
            "usd": record["costUsd"],
            "tokens_in": None,
            "tokens_out": None,
            "tokens_reasoning": None,
            "cache_read": None,
            "cache_write": None,
            "wall_s": record["artifact"]["wallS"],
        }
        assert supervisor["task"] == {
            "suite": "swe-bench-verified",
            "instance_id": record["scenarioId"],
            "split": "search",
            "seed": record["seed"],
            "rep": 0,
        }
        assert supervisor["policy"]["profile_commit"] == record["artifact"]["commit"]
        assert supervisor["artifacts"] == {
            "patch_path": record["artifact"]["patchPath"],
            "run_dir": record["artifact"]["runDir"],
            "transcript_ref": record["artifact"]["runDir"] + "/brain.jsonl",
        }
    # "anthropic/claude-sonnet-4-5" splits at the slash; the bare "claude-sonnet-4-5" has no provider.
    assert [(s["policy"]["provider"], s["policy"]["model"]) for s in run.role("supervisor")] == [
        ("anthropic", "claude-sonnet-4-5"),
        (None, "claude-sonnet-4-5"),
        ("anthropic", "claude-sonnet-4-5"),
        ("anthropic", "claude-sonnet-4-5"),
    ]


def test_supervisor_verdict_is_judge_json_verbatim(run: Backfilled) -> None:
    for supervisor in run.role("supervisor"):
        judge = Path(supervisor["artifacts"]["run_dir"]) / "judge.json"
        assert supervisor["outcome"]["verdict"] == json.loads(judge.read_text(encoding="utf-8"))


def test_worker_cost_and_model_come_from_the_session_row(run: Backfilled, demo: DemoLayout) -> None:
    for worker in run.role("worker"):
        (row,) = session_rows(demo.opencode_db, worker["outcome"]["metrics"]["worker_cwd"])
        model = json.loads(row["model"])
        elapsed_ms = row["time_updated"] - row["time_created"]
        assert worker["cost"] == {
            "usd": row["cost"],
            "tokens_in": row["tokens_input"],
            "tokens_out": row["tokens_output"],
            "tokens_reasoning": row["tokens_reasoning"],
            "cache_read": row["tokens_cache_read"],
            "cache_write": row["tokens_cache_write"],
            "wall_s": (elapsed_ms + 500) // 1000,
        }
        assert (worker["policy"]["model"], worker["policy"]["provider"]) == (model["id"], model["providerID"])
        assert worker["artifacts"]["transcript_ref"] == f"opencode:{row['id']}"
        assert worker["outcome"]["is_completed"] is True
    assert [w["cost"]["wall_s"] for w in run.role("worker")] == [17, 14, 11, 18]


def test_proposer_fields_come_from_receipt_and_transcript(run: Backfilled, demo: DemoLayout) -> None:
    proposer = run.role("proposer")[0]
    receipt = json.loads((run.out_dir / "proposer-shots" / "gen0-cand0-shot0.json").read_text())["receipt"]
    worktree = run.out_dir / "proposer-wt" / "gen0-cand0"
    (transcript,) = (demo.claude_projects_dir / claude_slug(str(worktree))).glob("*.jsonl")
    commit = cell_record(run.out_dir, "gen-0/candidate-0", "django__django-11532")["artifact"]["commit"]

    assert proposer["cost"] == {
        "usd": receipt["costUsd"],
        **claude_usage_once_per_message(transcript),
        "tokens_reasoning": None,
        "wall_s": 180,  # durationMs 179866
    }
    assert receipt["durationMs"] == 179866
    assert proposer["artifacts"] == {
        "patch_path": str(run.out_dir / "candidates" / f"{commit[:10]}.patch"),
        "run_dir": str(worktree),
        "transcript_ref": str(transcript),
    }
    assert proposer["policy"] == {
        "harness": "claude-code",
        "harness_version": None,
        "model": "claude-opus-4-1-20250805",  # from the transcript; the receipt says claude-opus-4-1
        "provider": None,
        "profile_commit": commit,
        "sampling": None,
    }
    assert (proposer["outcome"]["is_completed"], proposer["outcome"]["is_truncated"]) == (True, False)


def test_every_line_has_the_constant_fields(run: Backfilled) -> None:
    for line in run.lines:
        assert line["schema"] == "tangle.rollout.v1"
        assert line["run_id"] == "improve-golden"
        assert line["experiment_id"] is None
        assert line["tool_defs"] == []
        assert line["outcome"]["realness_gated"] is False
        assert line["provenance"]["captured_at"] == GOLDEN_CAPTURED_AT
        assert line["provenance"]["capture"] == "backfill"


def test_the_golden_worker_ids_name_supervisor_cwd_and_session(run: Backfilled) -> None:
    golden_workers = [json.loads(raw) for raw in GOLDEN_LEDGER.read_text(encoding="utf-8").splitlines()][
        1:8:2
    ]

    # Each worker's clone is a folder of its own name beside the round's other clones, as the
    # loop's temporary clones are (demo/plan.py, worker_cwd).
    assert [line["rollout_id"] for line in golden_workers] == [
        f"<uuid5 {w['parent_rollout_id']}|<ROOT>/worker-clones/golden/{name}|"
        f"{w['artifacts']['transcript_ref'].removeprefix('opencode:')}>"
        for w, name in zip(
            run.role("worker"), ["loops-w-0-tlroef", "loops-w-0-chbq5t", "loops-w-0-runlwn", "loops-w-0-aq7nn1"]
        )
    ]
