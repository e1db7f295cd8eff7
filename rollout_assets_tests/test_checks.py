"""Every asset check fails on a deliberately broken ledger, stage output or round, and says why.

Most tests run the checks' logic (`rollout_assets.audit`) on a copy of the command-line
backfill's ledger of demo round-001 with one line dropped, duplicated or edited. Others go
through Dagster: a materialized round whose ledger or stats file is then damaged, with only
the checks executed, and a full run where a blocking check stops `rollout_stats`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetCheckSeverity, DagsterInstance, instance_for_test

from rollout_assets import audit
from rollout_assets.audit import cells as audit_cells
from rollout_assets.audit import inputs as inputs_module
from rollout_assets.audit.stores import opencode_sessions
from rollout_assets.backfill.join import RoundBackfill
from rollout_assets.defs import checks as checks_module
from rollout_assets.defs.assets import rollout_ledger, rollout_stats
from rollout_assets.defs.assets import workers as workers_asset_module
from rollout_assets.demo import DemoLayout, EdgeCaseSite, edge_case_sites
from rollout_assets.ledger import write_ledger
from rollout_assets_tests.audit_runs import (
    audit_inputs_match,
    audit_integrity,
    audit_proposers,
    audit_stats,
    audit_supervisors,
    audit_workers,
    cells_without_worker_list,
)
from rollout_assets_tests.builders import (
    artifact,
    campaign_dir,
    cell,
    message,
    part,
    session,
    write_cell,
    write_json,
    write_opencode_db,
)
from rollout_assets_tests.dagster_rounds import (
    CHECK_NAMES,
    ROUND,
    ROUND_SPEC,
    cli_backfill,
    evaluations,
    files_under,
    lose_a_worker_line_in_the_ledger_stage,
    materializations,
    materialize_round,
    metadata_values,
    read_jsonl,
    round_resources,
    run_checks_of,
    write_jsonl,
    write_rounds,
)
from rollout_assets_tests.unprivileged import DROP_TO_NOBODY, run_unprivileged

Line = dict[str, Any]
GAP_REQUIRED = "Value error, messages is empty, so provenance.gap is required (why is there no transcript?)"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_rounds(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def sites(demo: DemoLayout) -> dict[str, EdgeCaseSite]:
    return edge_case_sites(demo.root, ROUND_SPEC)


@pytest.fixture(scope="module")
def backfill(demo: DemoLayout, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Line], dict[str, Any]]:
    """The lines and stats of the command-line backfill of round-001 (never modified)."""
    ledger_path = tmp_path_factory.mktemp("cli") / "rollout-ledger.jsonl"
    stats = cli_backfill(demo, demo.rounds_root / ROUND, ledger_path)
    return read_jsonl(ledger_path), stats


@pytest.fixture
def lines(backfill: tuple[list[Line], dict[str, Any]]) -> list[Line]:
    """A private deep copy of the ledger lines, to break."""
    return json.loads(json.dumps(backfill[0]))


@pytest.fixture
def out_dir(demo: DemoLayout) -> Path:
    return demo.rounds_root / ROUND


def _ledger(tmp_path: Path, lines: list[Line]) -> Path:
    return write_jsonl(tmp_path / "rollout-ledger.jsonl", lines)


def _index(lines: list[Line], predicate: Callable[[Line], bool]) -> int:
    """The index of the only line matching `predicate`."""
    found = [i for i, line in enumerate(lines) if predicate(line)]
    assert len(found) == 1, f"{len(found)} lines match"
    return found[0]


def _worker_lines_of(lines: list[Line], cwd: str) -> list[int]:
    return [
        i
        for i, line in enumerate(lines)
        if line["role"] == "worker" and line["outcome"]["metrics"]["worker_cwd"] == cwd
    ]


def _session_of(line: Line) -> str:
    return line["artifacts"]["transcript_ref"].removeprefix("opencode:")


# ---------------------------------------------------------------------------
# The unbroken ledger passes every audit (so each failure below is the break's doing)
# ---------------------------------------------------------------------------


def test_unbroken_backfill_passes_every_audit(
    tmp_path: Path,
    lines: list[Line],
    out_dir: Path,
    demo: DemoLayout,
    backfill: tuple[list[Line], dict[str, Any]],
) -> None:
    ledger = _ledger(tmp_path, lines)
    stats_path = tmp_path / "rollout-stats.json"
    stats_path.write_text(json.dumps(backfill[1]), encoding="utf-8")

    assert audit_supervisors(out_dir, ledger).passed
    assert audit_workers(out_dir, ledger, demo.opencode_db).passed
    assert audit_proposers(out_dir, ledger).passed
    assert audit_integrity(ledger).passed
    assert audit_inputs_match(out_dir, ledger, demo.opencode_db).passed
    assert audit_inputs_match(out_dir, ledger, demo.opencode_db, demo.claude_projects_dir).passed
    assert audit_stats(ledger, stats_path).passed
    assert cells_without_worker_list(out_dir) == []


# ---------------------------------------------------------------------------
# every_cell_has_one_supervisor_line
# ---------------------------------------------------------------------------


def test_supervisor_check_fails_on_a_dropped_supervisor_line(
    tmp_path: Path, lines: list[Line], out_dir: Path
) -> None:
    dropped = lines.pop(0)
    assert dropped["role"] == "supervisor"

    outcome = audit_supervisors(out_dir, _ledger(tmp_path, lines))

    assert (outcome.passed, outcome.expected, outcome.seen, outcome.missing) == (False, 30, 29, 1)
    assert outcome.details == {"duplicated": 0, "unexpected": 0}
    assert outcome.sample == ["missing ('baseline', 'astropy__astropy-12907', 0)"]


def test_supervisor_check_fails_on_a_duplicated_supervisor_line(
    tmp_path: Path, lines: list[Line], out_dir: Path
) -> None:
    lines.insert(1, lines[0])

    outcome = audit_supervisors(out_dir, _ledger(tmp_path, lines))

    assert (outcome.passed, outcome.expected, outcome.seen, outcome.missing) == (False, 30, 31, 0)
    assert outcome.details == {"duplicated": 1, "unexpected": 0}
    assert outcome.sample == ["duplicated ('baseline', 'astropy__astropy-12907', 0)"]


# ---------------------------------------------------------------------------
# every_worker_session_accounted_for
# ---------------------------------------------------------------------------


def test_worker_check_fails_on_a_dropped_session_line(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout, sites: dict[str, EdgeCaseSite]
) -> None:
    unbroken = audit_workers(out_dir, _ledger(tmp_path, lines), demo.opencode_db)
    # The cwd with two sessions keeps a line, so only the session goes missing.
    _, second = _worker_lines_of(lines, sites["cwd_with_two_sessions"].worker_cwd)
    session = _session_of(lines[second])
    del lines[second]

    outcome = audit_workers(out_dir, _ledger(tmp_path, lines), demo.opencode_db)

    assert outcome.passed is False
    assert (outcome.expected, outcome.seen, outcome.missing) == (unbroken.expected, unbroken.seen - 1, 1)
    assert (outcome.details["missing_cwds"], outcome.details["missing_sessions"]) == (0, 1)
    assert outcome.sample == [f"session: missing {session}"]


def test_worker_check_fails_on_a_dropped_gap_line_of_a_cwd_without_session(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout, sites: dict[str, EdgeCaseSite]
) -> None:
    cwd = sites["cwd_without_session"].worker_cwd
    (only,) = _worker_lines_of(lines, cwd)
    assert lines[only]["messages"] == []
    del lines[only]

    outcome = audit_workers(out_dir, _ledger(tmp_path, lines), demo.opencode_db)

    assert outcome.passed is False
    assert outcome.missing == 1
    assert (outcome.details["missing_cwds"], outcome.details["missing_sessions"]) == (1, 0)
    assert outcome.sample == [f"cwd: missing {cwd}"]


def test_worker_check_fails_on_a_duplicated_session_line(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout, sites: dict[str, EdgeCaseSite]
) -> None:
    (index,) = _worker_lines_of(lines, sites["non_ascii_text"].worker_cwd)
    session = _session_of(lines[index])
    lines.insert(index + 1, lines[index])

    outcome = audit_workers(out_dir, _ledger(tmp_path, lines), demo.opencode_db)

    assert outcome.passed is False
    assert outcome.missing == 0
    assert outcome.details["duplicated_sessions"] == 1
    assert outcome.sample == [f"session: duplicated {session}"]


# ---------------------------------------------------------------------------
# every_shot_receipt_has_one_proposer_line
# ---------------------------------------------------------------------------


def test_proposer_check_fails_on_a_dropped_proposer_line(
    tmp_path: Path, lines: list[Line], out_dir: Path
) -> None:
    index = _index(
        lines, lambda line: line["role"] == "proposer" and line["task"]["instance_id"] == "gen0-cand1-cedar"
    )
    del lines[index]

    outcome = audit_proposers(out_dir, _ledger(tmp_path, lines))

    assert (outcome.passed, outcome.expected, outcome.seen, outcome.missing) == (False, 4, 3, 1)
    assert outcome.sample == ["missing ('gen0-cand1-cedar', 0)"]


# ---------------------------------------------------------------------------
# ledger_lines_valid_and_linked
# ---------------------------------------------------------------------------


def test_integrity_check_fails_on_a_line_breaking_the_schema(tmp_path: Path, lines: list[Line]) -> None:
    lines[-1]["role"] = "boss"
    ledger = _ledger(tmp_path, lines)

    outcome = audit_integrity(ledger)

    assert (outcome.passed, outcome.expected, outcome.seen, outcome.missing) == (False, 96, 95, 1)
    assert outcome.details == {
        "invalid_lines": 1,
        "unlabeled_gaps": 0,
        "duplicated_ids": 0,
        "orphan_parents": 0,
        "transcripts_joined_twice": 0,
    }
    assert outcome.sample == [
        f"{ledger}:96: role: Input should be 'agent', 'supervisor', 'worker', 'proposer', 'judge' or 'analyst'"
    ]


def test_integrity_check_fails_on_an_empty_transcript_without_gap_reason(
    tmp_path: Path, lines: list[Line], sites: dict[str, EdgeCaseSite]
) -> None:
    (index,) = _worker_lines_of(lines, sites["cwd_without_session"].worker_cwd)
    del lines[index]["provenance"]["gap"]
    ledger = _ledger(tmp_path, lines)

    outcome = audit_integrity(ledger)

    # The schema itself refuses such a line, so it is counted as invalid (see the report).
    assert (outcome.passed, outcome.missing) == (False, 1)
    assert outcome.details == {
        "invalid_lines": 1,
        "unlabeled_gaps": 0,
        "duplicated_ids": 0,
        "orphan_parents": 0,
        "transcripts_joined_twice": 0,
    }
    assert outcome.sample == [f"{ledger}:{index + 1}: {GAP_REQUIRED}"]


def test_integrity_check_fails_on_a_duplicated_rollout_id(tmp_path: Path, lines: list[Line]) -> None:
    proposers = [line for line in lines if line["role"] == "proposer"]
    # Its sub-agent lines follow it to its new id: only the id is doubled.
    for line in lines:
        if line["parent_rollout_id"] == proposers[1]["rollout_id"]:
            line["parent_rollout_id"] = proposers[0]["rollout_id"]
    proposers[1]["rollout_id"] = proposers[0]["rollout_id"]

    outcome = audit_integrity(_ledger(tmp_path, lines))

    assert outcome.passed is False
    assert outcome.details == {
        "invalid_lines": 0,
        "unlabeled_gaps": 0,
        "duplicated_ids": 1,
        "orphan_parents": 0,
        "transcripts_joined_twice": 0,
    }
    assert outcome.sample == [f"duplicated rollout_id {proposers[0]['rollout_id']}"]


def test_integrity_check_fails_on_a_parent_that_is_no_line(tmp_path: Path, lines: list[Line]) -> None:
    index = next(i for i, line in enumerate(lines) if line["role"] == "worker")
    nowhere = str(uuid.uuid5(uuid.NAMESPACE_URL, "no such supervisor"))
    lines[index]["parent_rollout_id"] = nowhere
    ledger = _ledger(tmp_path, lines)

    outcome = audit_integrity(ledger)

    assert outcome.passed is False
    assert outcome.details == {
        "invalid_lines": 0,
        "unlabeled_gaps": 0,
        "duplicated_ids": 0,
        "orphan_parents": 1,
        "transcripts_joined_twice": 0,
    }
    assert outcome.sample == [f"{ledger}:{index + 1}: parent {nowhere} is no supervisor line"]


def _ledger_bytes(tmp_path: Path, lines: list[Line]) -> list[bytes]:
    """The ledger's lines as the writer writes them, `\n` included."""
    return _ledger(tmp_path, lines).read_bytes().splitlines(keepends=True)


def _invalid_utf8_in_a_message(raw: list[bytes]) -> int:
    index = next(i for i, line in enumerate(raw) if b'"messages":[{' in line)
    at = raw[index].index(b'"content":"') + len(b'"content":"')
    raw[index] = raw[index][:at] + b"\xff" + raw[index][at:]
    return index


def _null_reward_overflowing_a_double(raw: list[bytes]) -> int:
    # JSON.parse reads 1e400 as Infinity: a perfect reward where the cell gave none.
    index = next(i for i, line in enumerate(raw) if b'"reward":null' in line)
    raw[index] = raw[index].replace(b'"reward":null', b'"reward":1e400', 1)
    return index


def _final_newline_removed(raw: list[bytes]) -> int:
    raw[-1] = raw[-1][:-1]
    return len(raw) - 1


def _crlf_line_ends(raw: list[bytes]) -> int:
    raw[:] = [line[:-1] + b"\r\n" for line in raw]
    return 0


NOT_READ_STRICTLY = {
    "invalid UTF-8 in a message": (
        _invalid_utf8_in_a_message,
        "not UTF-8 ('utf-8' codec can't decode byte 0xff",
    ),
    "a null reward turned into 1e400": (
        _null_reward_overflowing_a_double,
        "the number 1e400 overflows a double",
    ),
    "the final newline removed": (
        _final_newline_removed,
        "no \\n at the end of the line: the ledger ends mid-line",
    ),
    "CRLF line ends": (_crlf_line_ends, "the line ends with \\r\\n, not \\n"),
}


@pytest.mark.parametrize("break_it", list(NOT_READ_STRICTLY), ids=list(NOT_READ_STRICTLY))
def test_integrity_check_reads_the_ledger_strictly(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout, break_it: str
) -> None:
    """docs/line-format.md: UTF-8, `\n` after every line. A line that is not is refused and named,
    never repaired (replacement characters, null for an overflowing number) into one that passes."""
    raw = _ledger_bytes(tmp_path, lines)
    ledger = tmp_path / "damaged.jsonl"
    ledger.write_bytes(b"".join(raw))
    assert audit_integrity(ledger).passed
    damage, why = NOT_READ_STRICTLY[break_it]
    index = damage(raw)
    ledger.write_bytes(b"".join(raw))

    outcome = audit_integrity(ledger)

    assert outcome.passed is False
    assert outcome.details["invalid_lines"] >= 1
    assert outcome.sample[0].startswith(f"{ledger}:{index + 1}: {why}")
    # A ledger the audit cannot read proves nothing to any check that counts its lines.
    assert not audit_supervisors(out_dir, ledger).passed
    assert not audit_inputs_match(out_dir, ledger, demo.opencode_db, demo.claude_projects_dir).passed


def test_a_lone_surrogate_escape_the_writer_writes_reads_back(tmp_path: Path, lines: list[Line]) -> None:
    """The writer escapes a lone UTF-16 surrogate (a truncated emoji in a tool output) as
    JavaScript does: still valid UTF-8 JSON, which strict reading must not refuse."""
    index = next(i for i, line in enumerate(lines) if line["messages"])
    lines[index]["messages"][0]["content"] = "cut \ud83d here"
    raw = _ledger_bytes(tmp_path, [line for i, line in enumerate(lines) if i != index])
    raw.insert(index, json.dumps(lines[index], separators=(",", ":")).encode("ascii") + b"\n")
    ledger = tmp_path / "surrogate.jsonl"
    ledger.write_bytes(b"".join(raw))

    assert b"\\ud83d" in raw[index]
    assert audit_integrity(ledger).passed


# ---------------------------------------------------------------------------
# stats_reconcile_with_ledger
# ---------------------------------------------------------------------------


def test_stats_check_fails_when_the_stats_do_not_reconcile(
    tmp_path: Path, lines: list[Line], backfill: tuple[list[Line], dict[str, Any]]
) -> None:
    stats = json.loads(json.dumps(backfill[1]))
    stats["lines"] += 1
    stats_path = tmp_path / "rollout-stats.json"
    stats_path.write_text(json.dumps(stats), encoding="utf-8")

    outcome = audit_stats(_ledger(tmp_path, lines), stats_path)

    assert (outcome.passed, outcome.expected, outcome.seen, outcome.missing) == (False, 96, 97, 3)
    assert outcome.sample == [
        "lines: stats say 97, ledger holds 96",
        "stats: Σ byRole != lines",
        "stats: fullTranscripts + gapLines != lines",
    ]


def test_stats_check_fails_when_a_role_count_is_wrong(
    tmp_path: Path, lines: list[Line], backfill: tuple[list[Line], dict[str, Any]]
) -> None:
    stats = json.loads(json.dumps(backfill[1]))
    stats["byRole"]["worker"] -= 1
    stats["byRole"]["proposer"] += 1
    stats_path = tmp_path / "rollout-stats.json"
    stats_path.write_text(json.dumps(stats), encoding="utf-8")

    outcome = audit_stats(_ledger(tmp_path, lines), stats_path)

    assert (outcome.passed, outcome.missing) == (False, 1)
    workers = backfill[1]["byRole"]["worker"]
    assert outcome.sample == [
        (
            f"byRole: stats say {{'agent': 3, 'supervisor': 30, 'worker': {workers - 1}, 'proposer': 5}}, "
            f"ledger holds {{'supervisor': 30, 'worker': {workers}, 'proposer': 4, 'agent': 3}}"
        )
    ]


def test_stats_check_fails_when_a_gap_reason_count_is_wrong(
    tmp_path: Path, lines: list[Line], backfill: tuple[list[Line], dict[str, Any]]
) -> None:
    stats = json.loads(json.dumps(backfill[1]))
    by_gap = stats["byGapReason"]
    assert by_gap["no_opencode_session"] == 1 and "opencode_store_unavailable" not in by_gap
    by_gap["opencode_store_unavailable"] = by_gap.pop("no_opencode_session")  # totals unchanged
    stats_path = tmp_path / "rollout-stats.json"
    stats_path.write_text(json.dumps(stats), encoding="utf-8")

    outcome = audit_stats(_ledger(tmp_path, lines), stats_path)

    assert (outcome.passed, outcome.missing) == (False, 1)
    assert outcome.sample[0].startswith("byGapReason: stats say {")
    assert "'no_opencode_session': 1" in outcome.sample[0].split("ledger holds")[1]


@pytest.mark.parametrize(
    "edit",
    [
        "a mean reward",
        # Beyond what rounding to 12 decimals (means) or 6 (costs) can explain, by a little.
        "a mean reward off by 4e-10",
        "a labeled count",
        "a cost",
        "a cost off by 9e-7",
        "a role without costs",
    ],
)
def test_stats_check_fails_when_a_rewards_or_costs_figure_is_wrong(
    tmp_path: Path, lines: list[Line], backfill: tuple[list[Line], dict[str, Any]], edit: str
) -> None:
    """Stats counted from another worker file than the ledger's (a stage killed between its two
    files) keep every count right and get the means wrong."""
    stats = json.loads(json.dumps(backfill[1]))
    if edit == "a mean reward":
        stats["rewardByRole"]["worker"]["mean"] += 0.035
    elif edit == "a mean reward off by 4e-10":
        stats["rewardByRole"]["worker"]["mean"] += 4e-10
    elif edit == "a cost off by 9e-7":
        stats["costUsdByRole"]["proposer"]["usd"] += 9e-7
    elif edit == "a labeled count":
        stats["rewardByRole"]["supervisor"]["labeled"] -= 1
    elif edit == "a cost":
        stats["costUsdByRole"]["proposer"]["usd"] += 0.01
    else:
        del stats["costUsdByRole"]["proposer"]
    stats_path = tmp_path / "rollout-stats.json"
    stats_path.write_text(json.dumps(stats), encoding="utf-8")

    outcome = audit_stats(_ledger(tmp_path, lines), stats_path)

    assert (outcome.passed, outcome.missing) == (False, 1)
    key = "rewardByRole" if edit.startswith(("a mean reward", "a labeled count")) else "costUsdByRole"
    assert outcome.sample[0].startswith(f"{key}.")


@pytest.mark.parametrize(
    ("key", "change", "problem"),
    [
        ("workerSessionsJoined", 1, "workerSessionsJoined: stats say "),
        ("workerCwdsMissed", -1, "workerCwdsMissed: stats say "),
        ("workerSessionsEmpty", 1, "workerSessionsEmpty: stats say "),
        ("proposerShotsJoined", -1, "proposerShotsJoined: stats say "),
        ("proposerShotsMissed", 1, "proposerShotsMissed: stats say "),
        ("proposerTranscriptsEmpty", 1, "proposerTranscriptsEmpty: stats say "),
        ("cellsWithoutWorkerList", 1, "cellsWithoutWorkerList: stats say "),
        ("opencodeDbAvailable", False, "opencodeDbAvailable: stats say false, yet "),
        ("opencodeDbAvailable", None, "opencodeDbAvailable: stats say None, not true or false"),
    ],
)
def test_stats_check_fails_when_a_join_counter_disagrees_with_the_ledger(
    tmp_path: Path,
    lines: list[Line],
    backfill: tuple[list[Line], dict[str, Any]],
    key: str,
    change: int | bool | None,
    problem: str,
) -> None:
    """Every counter of what was joined follows from the lines (their role, transcript and gap);
    the summary shows opencodeDbAvailable per round."""
    stats = json.loads(json.dumps(backfill[1]))
    if isinstance(change, int) and not isinstance(change, bool):
        assert stats[key] + change >= 0
        stats[key] += change
    else:
        stats[key] = change
    stats_path = tmp_path / "rollout-stats.json"
    stats_path.write_text(json.dumps(stats), encoding="utf-8")

    outcome = audit_stats(_ledger(tmp_path, lines), stats_path)

    assert (outcome.passed, outcome.missing) == (False, 1)
    assert outcome.sample[0].startswith(problem), outcome.sample


def test_stats_check_accepts_the_backfills_rounded_means_and_costs(
    tmp_path: Path, lines: list[Line], backfill: tuple[list[Line], dict[str, Any]]
) -> None:
    stats_path = tmp_path / "rollout-stats.json"
    stats_path.write_text(json.dumps(backfill[1]), encoding="utf-8")
    assert backfill[1]["rewardByRole"] and backfill[1]["costUsdByRole"]

    assert audit_stats(_ledger(tmp_path, lines), stats_path).passed


def test_stats_check_classifies_the_ledgers_gaps_by_their_wording(
    tmp_path: Path, lines: list[Line], backfill: tuple[list[Line], dict[str, Any]]
) -> None:
    """A gap relabeled in the ledger, the stats left as they were: the reasons no longer reconcile."""
    stats_path = tmp_path / "rollout-stats.json"
    stats_path.write_text(json.dumps(backfill[1]), encoding="utf-8")
    assert audit_stats(_ledger(tmp_path, lines), stats_path).passed
    _no_session_gap_relabeled_store_unavailable(lines)
    _supervisor_gap_changed(lines)

    outcome = audit_stats(_ledger(tmp_path, lines), stats_path)

    assert outcome.passed is False
    (problem,) = [problem for problem in outcome.sample if problem.startswith("byGapReason: ")]
    held = problem.split("ledger holds ")[1]
    assert "'opencode_store_unavailable': 1" in held and "'other': 1" in held
    assert "no_opencode_session" not in held
    # The relabeled worker line now says the store was unavailable, which the stats deny.
    assert "opencodeDbAvailable: stats say true, yet 1 worker line(s) say the store was unavailable" in (
        outcome.sample
    )


# ---------------------------------------------------------------------------
# every_cell_lists_its_workers (WARN, non-blocking)
# ---------------------------------------------------------------------------


def test_worker_list_check_names_a_cell_without_result_json(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo")
    site = edge_case_sites(layout.root, ROUND_SPEC)["composite_judge_score"]
    (site.run_dir / "result.json").unlink()

    assert cells_without_worker_list(layout.rounds_root / ROUND) == [
        "gen1-cand0/astropy__astropy-12907/rep1"
    ]


@pytest.mark.parametrize("workers", [2, 3])
def test_inputs_recount_on_several_processes_equals_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """Campaigns recounted in forked processes and merged in order give the one-pass recount,
    the order of the cells without a worker list included."""
    layout = write_rounds(tmp_path / "demo")
    sites = edge_case_sites(layout.root, ROUND_SPEC)
    (sites["composite_judge_score"].run_dir / "result.json").unlink()  # gen1-cand0
    (sites["malformed_part"].run_dir / "result.json").write_text("{not json")  # gen0-cand1
    out_dir = layout.rounds_root / ROUND
    one = audit.recount_inputs(out_dir, layout.opencode_db, workers=1)

    monkeypatch.setattr(audit_cells, "_PARALLEL_MIN_CELLS", 0)  # the demo round is small
    parts = audit.recount_inputs(out_dir, layout.opencode_db, workers=workers)

    assert parts == one
    assert len(one.cells_without_worker_list) == 2 and one.tally("session_ids")


@pytest.mark.parametrize("workers", [1, 2])
def test_inputs_recount_in_runs_of_two_cell_folders_equals_one_run_a_campaign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """A campaign's cells read a few folders per task and merged come in (scenario, rep) order
    even when the folder names sort the other way round, as one task a campaign gives them."""
    layout = write_rounds(tmp_path / "demo")
    sites = edge_case_sites(layout.root, ROUND_SPEC)
    (sites["composite_judge_score"].run_dir / "result.json").unlink()  # a cell without a worker list
    out_dir = layout.rounds_root / ROUND
    baseline = out_dir / "improve-run" / "baseline"
    cells = sorted(path for path in baseline.iterdir() if (path / "cached-result.json").is_file())
    for number, folder in enumerate(reversed(cells)):
        folder.rename(baseline / f"{number:03d}-{folder.name}")
    monkeypatch.setattr(audit_cells, "_PARALLEL_MIN_CELLS", 0)
    whole = audit.recount_inputs(out_dir, layout.opencode_db, workers=workers)

    monkeypatch.setattr(audit_cells, "_CELLS_PER_TASK", 2)
    runs = audit.recount_inputs(out_dir, layout.opencode_db, workers=workers)

    assert runs == whole  # the expected lines and the keys in the same order, the same rewards
    assert len(cells) > 4 and len(whole.cells_without_worker_list) == 1


def test_worker_list_check_warns_without_failing_the_run(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo")
    site = edge_case_sites(layout.root, ROUND_SPEC)["composite_judge_score"]
    (site.run_dir / "result.json").unlink()
    with instance_for_test() as instance:
        result = materialize_round(instance, round_resources(layout, tmp_path / "ledgers"))

    assert result.success
    found = evaluations(result)
    warned = found["every_cell_lists_its_workers"]
    assert (warned.passed, warned.severity, warned.partition) == (False, AssetCheckSeverity.WARN, ROUND)
    assert metadata_values(warned.metadata) == {
        "round": ROUND,
        "cells_without_worker_list": 1,
        "cells": ["gen1-cand0/astropy__astropy-12907/rep1"],
    }
    assert {name for name, e in found.items() if e.passed} == CHECK_NAMES - {"every_cell_lists_its_workers"}


def test_inputs_recount_takes_over_a_walk_of_the_cells_made_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = write_rounds(tmp_path / "demo")
    (edge_case_sites(layout.root, ROUND_SPEC)["composite_judge_score"].run_dir / "result.json").unlink()
    out_dir, claude = layout.rounds_root / ROUND, layout.claude_projects_dir
    own_walk = audit.recount_inputs(out_dir, layout.opencode_db, claude_projects=claude)
    walked = audit_cells.recount_cells(out_dir, None)

    def no_second_walk(*args: Any) -> None:
        raise AssertionError("the cells were walked again")

    monkeypatch.setattr(inputs_module, "recount_cells", no_second_walk)
    taken_over = audit.recount_inputs(out_dir, layout.opencode_db, claude_projects=claude, cells=walked)

    assert taken_over == own_walk
    assert len(own_walk.cells_without_worker_list) == 1 and own_walk.tally("session_ids")


def test_a_run_walks_the_cells_once_and_copies_the_store_after_the_worker_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warning on campaign_cells walks the cells; the ledger checks' inputs recount takes
    that walk over and makes the audit's copy of the store only once the worker stage has read
    the store (and removed its snapshot): two copies at once made the second wait on the disk."""
    layout = write_rounds(tmp_path / "demo")
    events: list[str] = []

    def recording(module: Any, name: str, event: str, after: bool = False) -> None:
        original = getattr(module, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if not after:
                events.append(event)
            result = original(*args, **kwargs)
            if after:
                events.append(event)
            return result

        monkeypatch.setattr(module, name, call)

    recording(checks_module, "recount_cells", "the cells walked")
    recording(inputs_module, "recount_cells", "the cells walked again")
    recording(inputs_module, "read_store", "the audit's copy of the store")
    recording(workers_asset_module, "write_worker_sessions", "the worker stage done", after=True)
    with instance_for_test() as instance:
        result = materialize_round(instance, round_resources(layout, tmp_path / "ledgers"))

    assert result.success
    assert events == ["the cells walked", "the worker stage done", "the audit's copy of the store"]


# ---------------------------------------------------------------------------
# every_line_is_its_invocation_in_order: lines that are all there, but not what they should be
# ---------------------------------------------------------------------------


def _supervisors(lines: list[Line]) -> list[int]:
    return [i for i, line in enumerate(lines) if line["role"] == "supervisor"]


def _move_a_worker_to_another_supervisor(lines: list[Line]) -> None:
    first, second = _supervisors(lines)[:2]
    worker = next(
        i for i, line in enumerate(lines) if line["parent_rollout_id"] == lines[first]["rollout_id"]
    )
    lines[worker]["parent_rollout_id"] = lines[second]["rollout_id"]


def _null_reward_to_zero(lines: list[Line]) -> None:
    index = next(i for i in _supervisors(lines) if lines[i]["outcome"]["reward"] is None)
    lines[index]["outcome"].update(reward=0, reward_source="swe-arena-official-judge")


def _reverse(lines: list[Line]) -> None:
    lines.reverse()


def _swap_two_supervisors(lines: list[Line]) -> None:
    first, second = _supervisors(lines)[:2]
    lines[first], lines[second] = lines[second], lines[first]


def _transcript_to_a_gap(lines: list[Line]) -> None:
    index = next(i for i, line in enumerate(lines) if line["role"] == "worker" and line["messages"])
    lines[index]["messages"] = []
    cwd = lines[index]["outcome"]["metrics"]["worker_cwd"]
    lines[index]["provenance"]["gap"] = f"no opencode session found for worker cwd {cwd}"
    lines[index]["artifacts"]["transcript_ref"] = None


def _line_of_another_round(lines: list[Line]) -> None:
    index = next(i for i, line in enumerate(lines) if line["role"] == "proposer")
    lines[index]["run_id"] = "improve-round-002"


def _swap_instance_ids(lines: list[Line]) -> None:
    first, *others = _supervisors(lines)
    task = lines[first]["task"]
    other = next(lines[i]["task"] for i in others if lines[i]["task"]["instance_id"] != task["instance_id"])
    task["instance_id"], other["instance_id"] = other["instance_id"], task["instance_id"]


def _extra_gap_line(lines: list[Line]) -> None:
    index = next(i for i, line in enumerate(lines) if line["role"] == "worker")
    extra = json.loads(json.dumps(lines[index]))
    extra["rollout_id"] = str(uuid.uuid4())
    extra["messages"], extra["artifacts"]["transcript_ref"] = [], None
    extra["outcome"]["metrics"]["worker_cwd"] = "/clones/never-listed"
    extra["provenance"]["gap"] = "no opencode session found for worker cwd /clones/never-listed"
    lines.insert(index + 1, extra)


def _worker_reward_differs_from_its_supervisor(lines: list[Line]) -> None:
    index = next(
        i
        for i, line in enumerate(lines)
        if line["role"] == "worker" and line["outcome"]["reward"] is not None
    )
    lines[index]["outcome"]["reward"] = 0.25


def _proposer_reward_changed(lines: list[Line]) -> None:
    index = next(i for i, line in enumerate(lines) if line["role"] == "proposer")
    reward = lines[index]["outcome"]["reward"]
    lines[index]["outcome"]["reward"] = 1 if reward != 1 else 0.5


def _worker_of_another_instance(lines: list[Line]) -> None:
    task = next(line for line in lines if line["role"] == "worker")["task"]
    task["instance_id"] = next(
        line["task"]["instance_id"] for line in lines if line["task"]["instance_id"] != task["instance_id"]
    )


def _supervisor_of_another_generation(lines: list[Line]) -> None:
    lines[_supervisors(lines)[0]].update(generation=7, candidate_index=3)


def _proposer_of_another_candidate(lines: list[Line]) -> None:
    index = next(i for i, line in enumerate(lines) if line["role"] == "proposer")
    lines[index].update(candidate_id="gen5-cand5", generation=5, candidate_index=5)


def _supervisor_given_a_parent(lines: list[Line]) -> None:
    first, second = _supervisors(lines)[:2]
    lines[second]["parent_rollout_id"] = lines[first]["rollout_id"]


def _proposer_given_a_parent(lines: list[Line]) -> None:
    index = next(i for i, line in enumerate(lines) if line["role"] == "proposer")
    lines[index]["parent_rollout_id"] = lines[_supervisors(lines)[0]]["rollout_id"]


def _supervisor_relabeled_a_proposer(lines: list[Line]) -> None:
    lines[_supervisors(lines)[0]]["role"] = "proposer"  # a proposer's id is not checked against its fields


def _gap_line_of(lines: list[Line], kind: str) -> int:
    """The first line whose gap starts like `kind`'s wording."""
    return next(i for i, line in enumerate(lines) if line["provenance"].get("gap", "").startswith(kind))


def _no_session_gap_relabeled_store_unavailable(lines: list[Line]) -> None:
    index = _gap_line_of(lines, "no opencode session found for worker cwd ")
    cwd = lines[index]["outcome"]["metrics"]["worker_cwd"]
    lines[index]["provenance"]["gap"] = f"opencode store unavailable; worker cwd {cwd} unrecoverable"


def _empty_session_relabeled_no_session(lines: list[Line]) -> None:
    index = _gap_line_of(lines, "opencode session ")
    cwd = lines[index]["outcome"]["metrics"]["worker_cwd"]
    lines[index]["provenance"]["gap"] = f"no opencode session found for worker cwd {cwd}"


def _supervisor_gap_changed(lines: list[Line]) -> None:
    lines[_supervisors(lines)[0]]["provenance"]["gap"] = "x"


def _supervisor_gap_claims_its_result_json_missing(lines: list[Line]) -> None:
    lines[_supervisors(lines)[0]]["provenance"]["gap"] += (
        "; result.json missing: this cell's worker sessions cannot be listed"
    )


def _joined_worker_given_a_gap_too(lines: list[Line]) -> None:
    index = next(i for i, line in enumerate(lines) if line["role"] == "worker" and line["messages"])
    lines[index]["provenance"]["gap"] = (
        f"opencode session {_session_of(lines[index])} has no readable message parts"
    )


def _proposer_gap_names_another_worktree(lines: list[Line]) -> None:
    index = _gap_line_of(lines, "no claude transcript matched worktree ")
    lines[index]["provenance"]["gap"] = (
        "no claude transcript matched worktree /elsewhere in the shot's time window"
    )


def _proposer_gap_names_a_transcript_that_is_no_file_of_its_worktree(lines: list[Line]) -> None:
    index = _gap_line_of(lines, "no claude transcript matched worktree ")
    lines[index]["provenance"]["gap"] = (
        "claude transcript /elsewhere/made-up.jsonl matched the shot's time window but holds no conversation messages"
    )


def _reward_source_nulled(lines: list[Line]) -> None:
    index = next(i for i in _supervisors(lines) if lines[i]["outcome"]["reward"] is not None)
    lines[index]["outcome"]["reward_source"] = None


def _worker_reward_source_of_a_supervisor(lines: list[Line]) -> None:
    index = next(
        i
        for i, line in enumerate(lines)
        if line["role"] == "worker" and line["outcome"]["reward"] is not None
    )
    lines[index]["outcome"]["reward_source"] = "swe-arena-official-judge"


def _reward_source_without_a_reward(lines: list[Line]) -> None:
    index = next(i for i in _supervisors(lines) if lines[i]["outcome"]["reward"] is None)
    lines[index]["outcome"]["reward_source"] = "swe-arena-official-judge"


MISPLACED = {
    "a worker line naming another instance": _worker_of_another_instance,
    "a supervisor line naming another generation": _supervisor_of_another_generation,
    "a proposer line naming another candidate": _proposer_of_another_candidate,
    "a proposer reward that is not its candidate's resolved fraction": _proposer_reward_changed,
    "a worker moved under another supervisor": _move_a_worker_to_another_supervisor,
    "a null supervisor reward turned into 0": _null_reward_to_zero,
    "the ledger reversed": _reverse,
    "two supervisor lines swapped": _swap_two_supervisors,
    "a joined transcript turned into a gap line": _transcript_to_a_gap,
    "a line with another round's run_id": _line_of_another_round,
    "instance ids swapped between two supervisors": _swap_instance_ids,
    "a made-up gap line for a cwd no cell lists": _extra_gap_line,
    "a worker reward that is not its supervisor's": _worker_reward_differs_from_its_supervisor,
    "a supervisor given a parent": _supervisor_given_a_parent,
    "a proposer given a parent": _proposer_given_a_parent,
    "a supervisor line relabeled a proposer": _supervisor_relabeled_a_proposer,
    "a no-session gap relabeled store unavailable": _no_session_gap_relabeled_store_unavailable,
    "an empty session's gap relabeled no session": _empty_session_relabeled_no_session,
    "a supervisor gap changed": _supervisor_gap_changed,
    "a supervisor gap claiming its result.json missing": _supervisor_gap_claims_its_result_json_missing,
    "a joined worker given a gap too": _joined_worker_given_a_gap_too,
    "a proposer gap naming another worktree": _proposer_gap_names_another_worktree,
    "a proposer gap naming a transcript no file of its worktree": _proposer_gap_names_a_transcript_that_is_no_file_of_its_worktree,
    "a reward_source nulled beside a reward": _reward_source_nulled,
    "a worker reward_source of a supervisor": _worker_reward_source_of_a_supervisor,
    "a reward_source beside a null reward": _reward_source_without_a_reward,
}


@pytest.mark.parametrize("break_it", list(MISPLACED), ids=list(MISPLACED))
def test_the_order_and_identity_check_fails_on_a_misplaced_or_changed_line(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout, break_it: str
) -> None:
    claude = demo.claude_projects_dir
    before = audit_inputs_match(out_dir, _ledger(tmp_path, lines), demo.opencode_db, claude)
    MISPLACED[break_it](lines)

    result = audit_inputs_match(out_dir, _ledger(tmp_path, lines), demo.opencode_db, claude)

    assert before.passed and before.sample == []
    assert not result.passed
    assert result.sample, "a failing check says where"
    # Every line still validates: only this check can see what is wrong.
    assert audit_integrity(_ledger(tmp_path, lines)).passed or break_it in {
        "a joined transcript turned into a gap line",
        "a supervisor line relabeled a proposer",  # its workers' parent is no supervisor line any more
    }


def test_the_order_and_identity_check_names_the_first_line_out_of_place(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout
) -> None:
    first, second = _supervisors(lines)[:2]
    _swap_two_supervisors(lines)

    result = audit_inputs_match(out_dir, _ledger(tmp_path, lines), demo.opencode_db)

    assert result.details["first_line_out_of_place"] == first + 1
    assert any(f":{first + 1}: expected supervisor " in problem for problem in result.sample)
    assert (result.details["ids_not_matching_fields"], result.details["wrong_rewards"]) == (0, 0)
    assert second > first
    assert result.missing == 1  # the same lines in another order


def test_the_order_and_identity_check_counts_every_line_not_in_place(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout
) -> None:
    """Two lines dropped: two lines are not where the inputs put them, not one."""
    workers = [index for index, line in enumerate(lines) if line["role"] == "worker"]
    for index in reversed(workers[:2]):
        del lines[index]

    result = audit_inputs_match(out_dir, _ledger(tmp_path, lines), demo.opencode_db)

    assert (result.passed, result.expected - result.seen, result.missing) == (False, 2, 2)


def test_the_order_and_identity_check_counts_a_line_of_another_round_once(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout
) -> None:
    foreign = copy.deepcopy(lines[0])
    foreign["run_id"] = "another-round"
    lines.append(foreign)

    result = audit_inputs_match(out_dir, _ledger(tmp_path, lines), demo.opencode_db)

    assert (result.passed, result.details["lines_of_another_run"], result.missing) == (False, 1, 1)


def test_the_order_and_identity_check_reports_a_changed_reward_with_the_cells_verdict(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout
) -> None:
    _null_reward_to_zero(lines)

    result = audit_inputs_match(out_dir, _ledger(tmp_path, lines), demo.opencode_db)

    assert result.details["wrong_rewards"] == 1
    assert any(
        "reward 0, but the inputs give supervisor " in p and "the reward None" in p for p in result.sample
    )


def test_a_cwd_two_cells_list_gets_its_sessions_under_each_and_every_audit_passes(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    store = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("ses_1", "/wt/shared")],
        messages=[message("m1", "ses_1", "user")],
        parts=[part("p1", "m1", "text", text="fix it")],
    )
    for campaign, run_dir in (
        (campaign_dir(out_dir), tmp_path / "run-a"),
        (campaign_dir(out_dir, 0, 0), tmp_path / "run-b"),
    ):
        write_cell(campaign, "c", cell("a__a-1", 0, artifact=artifact(runDir=str(run_dir))))
        write_json(run_dir / "result.json", {"recoveredSpend": {"workerCwds": ["/wt/shared"]}})
    ledger = tmp_path / "rollout-ledger.jsonl"
    with RoundBackfill(out_dir, opencode_db=store, claude_projects_dir=tmp_path / "claude") as run:
        write_ledger(ledger, run.lines())

    workers = [line for line in read_jsonl(ledger) if line["role"] == "worker"]

    # Each cell's supervisor lists the cwd: its session is joined under both (the spec's rule per cell).
    assert [_session_of(line) for line in workers] == ["ses_1", "ses_1"]
    assert audit_workers(out_dir, ledger, store).passed
    assert audit_inputs_match(out_dir, ledger, store).passed
    write_jsonl(ledger, [line for line in read_jsonl(ledger) if line is not None][:-1])  # one of them dropped
    assert not audit_workers(out_dir, ledger, store).passed


def test_a_worker_cwd_that_is_not_utf8_is_matched_as_the_join_binds_it(tmp_path: Path) -> None:
    """A clone folder named with a Latin-1 byte: result.json is read with replacement, so the
    cwd is `/clones/w\ufffd`, which the join binds as SQL text (its UTF-8 bytes). A session whose
    `directory` holds the raw byte 0xff is not that cwd's; one holding the replacement
    character's UTF-8 bytes is. The audit compares the same bytes, so both lines pass."""
    out_dir = tmp_path / "round"
    for name, cwd in (("a", b"/clones/w\xff"), ("b", b"/clones/v\xff")):
        run_dir = tmp_path / f"run-{name}"
        write_cell(
            campaign_dir(out_dir), name, cell(f"x__x-{name}", 0, artifact=artifact(runDir=str(run_dir)))
        )
        write_json(run_dir / "result.json", b'{"spawned":1,"recoveredSpend":{"workerCwds":["' + cwd + b'"]}}')
    store = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("ses_raw", "placeholder"), session("ses_utf8", "/clones/v\ufffd")],
        messages=[message("m1", "ses_raw", "user"), message("m2", "ses_utf8", "user")],
        parts=[part("p1", "m1", "text", text="hi"), part("p2", "m2", "text", text="hi")],
    )
    with sqlite3.connect(store) as connection:
        connection.execute(
            "UPDATE session SET directory = CAST(? AS TEXT) WHERE id = 'ses_raw'", (b"/clones/w\xff",)
        )
    connection.close()
    ledger = tmp_path / "rollout-ledger.jsonl"
    with RoundBackfill(out_dir, opencode_db=store, claude_projects_dir=tmp_path / "claude") as run:
        write_ledger(ledger, run.lines())

    workers = [line for line in read_jsonl(ledger) if line["role"] == "worker"]

    assert [
        (line["outcome"]["metrics"]["worker_cwd"], line["artifacts"]["transcript_ref"]) for line in workers
    ] == [
        ("/clones/w\ufffd", None),
        ("/clones/v\ufffd", "opencode:ses_utf8"),
    ]
    inputs = audit.recount_inputs(out_dir, store)
    assert inputs.tally("session_ids") == {"ses_utf8": 1}
    assert audit_workers(out_dir, ledger, store).passed
    assert audit_inputs_match(out_dir, ledger, store).passed


# The audit as `nobody`, for whom a chmod'ed folder really is closed (root reads any folder):
# everything is imported as root first, then the process drops its privileges.
AUDIT_AS_NOBODY = (
    textwrap.dedent(
        """
    import json, sys
    from pathlib import Path
    from rollout_assets import audit
    """
    )
    + DROP_TO_NOBODY
    + textwrap.dedent(
        """
    try:
        recount = audit.recount_inputs(Path(sys.argv[1]), None, workers=1)
    except Exception as error:
        print(json.dumps([type(error).__name__, str(error)]))
    else:
        print(json.dumps(["no error", len(recount.tally("cells")), len(recount.receipts)]))
    """
    )
)


@pytest.mark.parametrize(
    ("closed", "mode", "why"),
    [
        (
            "improve-run/baseline/c1",
            0o644,
            "cannot tell whether it holds a cached-result.json (Permission denied)",
        ),
        ("improve-run/gen-0/candidate-0", 0o311, "cannot list the folder (Permission denied)"),
        ("proposer-shots", 0o311, "cannot list the folder (Permission denied)"),
    ],
    ids=[
        "a cell folder it cannot search",
        "a campaign folder it cannot list",
        "a receipts folder it cannot list",
    ],
)
def test_audit_refuses_a_round_folder_it_cannot_look_into(
    world_readable_tmp: Path, closed: str, mode: int, why: str
) -> None:
    """A folder that exists but cannot be searched or listed may hold cells or receipts: the
    audit stops naming it, as the round's readers do, instead of expecting none of its lines."""
    out_dir = world_readable_tmp / "round"
    for campaign in (campaign_dir(out_dir), campaign_dir(out_dir, 0, 0)):
        for name in ("c0", "c1"):
            write_cell(campaign, name, cell(f"x__x-{name}", 0))
    write_json(out_dir / "proposer-shots" / "gen0-cand0-shot0.json", {"receipt": {}})
    assert audit.recount_inputs(out_dir, None).tally("cells").total() == 4
    (out_dir / closed).chmod(mode)

    result = run_unprivileged(AUDIT_AS_NOBODY, str(out_dir))

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["UnreadableRound", f"{out_dir / closed}: {why}"]


# ---------------------------------------------------------------------------
# Through Dagster: a materialized round, its outputs damaged, only the checks executed
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dagster_round(
    demo: DemoLayout, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[DagsterInstance, dict, Path]]:
    """(instance, resources, the round's output folder) after one successful materialization."""
    resources = round_resources(demo, tmp_path_factory.mktemp("ledgers"))
    with instance_for_test() as instance:
        assert materialize_round(instance, resources).success
        yield instance, resources, resources["locations"].ledger_root.path / ROUND


@pytest.fixture
def damaged(
    dagster_round: tuple[DagsterInstance, dict, Path],
) -> Iterator[tuple[DagsterInstance, dict, Path]]:
    """The materialized round, restored byte for byte after the test damaged it."""
    folder = dagster_round[2]
    saved = {path: path.read_bytes() for path in files_under(folder)}
    yield dagster_round
    for path in files_under(folder):
        if path not in saved:
            path.unlink()
    for path, content in saved.items():
        path.write_bytes(content)


def test_checks_alone_pass_on_the_untouched_round(damaged: tuple[DagsterInstance, dict, Path]) -> None:
    instance, resources, _ = damaged

    result = run_checks_of(instance, resources, rollout_ledger)

    assert result.success
    assert materializations(result) == {}
    assert {name: (e.passed, e.partition) for name, e in evaluations(result).items()} == {
        "every_cell_has_one_supervisor_line": (True, ROUND),
        "every_worker_session_accounted_for": (True, ROUND),
        "every_shot_receipt_has_one_proposer_line": (True, ROUND),
        "every_line_is_its_invocation_in_order": (True, ROUND),
        "every_gap_is_warranted": (True, ROUND),
        "every_usage_is_its_transcripts": (True, ROUND),
        "ledger_lines_valid_and_linked": (True, ROUND),
    }


def test_supervisor_check_run_by_dagster_fails_on_a_ledger_missing_a_line(
    damaged: tuple[DagsterInstance, dict, Path],
) -> None:
    instance, resources, folder = damaged
    ledger = folder / "rollout-ledger.jsonl"
    write_jsonl(ledger, read_jsonl(ledger)[1:])

    result = run_checks_of(instance, resources, rollout_ledger)

    assert not result.success
    check = evaluations(result)["every_cell_has_one_supervisor_line"]
    assert (check.passed, check.severity, check.partition) == (False, AssetCheckSeverity.ERROR, ROUND)
    metadata = metadata_values(check.metadata)
    assert (metadata["expected"], metadata["seen"], metadata["missing"]) == (30, 29, 1)
    assert metadata["sample"] == ["missing ('baseline', 'astropy__astropy-12907', 0)"]


def test_order_check_run_by_dagster_fails_alone_on_a_reversed_ledger(
    damaged: tuple[DagsterInstance, dict, Path],
) -> None:
    instance, resources, folder = damaged
    ledger = folder / "rollout-ledger.jsonl"
    write_jsonl(ledger, read_jsonl(ledger)[::-1])

    result = run_checks_of(instance, resources, rollout_ledger)

    assert not result.success
    found = evaluations(result)
    # Every line is still there, once, valid and linked: only the order check sees the damage.
    assert {name for name, e in found.items() if not e.passed} == {"every_line_is_its_invocation_in_order"}
    check = found["every_line_is_its_invocation_in_order"]
    assert (check.severity, check.partition) == (AssetCheckSeverity.ERROR, ROUND)
    metadata = metadata_values(check.metadata)
    assert metadata["first_line_out_of_place"] == 1
    assert metadata["sample"][0].startswith(
        f"{ledger}:1: expected supervisor baseline/astropy__astropy-12907/rep0"
    )


def test_integrity_check_run_by_dagster_fails_on_an_orphaned_worker_line(
    damaged: tuple[DagsterInstance, dict, Path],
) -> None:
    instance, resources, folder = damaged
    ledger = folder / "rollout-ledger.jsonl"
    lines = read_jsonl(ledger)
    nowhere = str(uuid.uuid5(uuid.NAMESPACE_URL, "no such supervisor"))
    lines[1]["parent_rollout_id"] = nowhere
    write_jsonl(ledger, lines)

    result = run_checks_of(instance, resources, rollout_ledger)

    check = evaluations(result)["ledger_lines_valid_and_linked"]
    assert check.passed is False
    metadata = metadata_values(check.metadata)
    assert (metadata["orphan_parents"], metadata["invalid_lines"]) == (1, 0)
    assert metadata["sample"] == [f"{ledger}:2: parent {nowhere} is no supervisor line"]


def test_stats_check_run_by_dagster_fails_on_edited_stats(
    damaged: tuple[DagsterInstance, dict, Path],
) -> None:
    instance, resources, folder = damaged
    stats_path = folder / "rollout-stats.json"
    stats = json.loads(stats_path.read_text(encoding="utf-8"))
    stats["gapLines"] += 2
    stats_path.write_text(json.dumps(stats), encoding="utf-8")

    result = run_checks_of(instance, resources, rollout_stats)

    assert not result.success
    check = evaluations(result)["stats_reconcile_with_ledger"]
    assert (check.passed, check.partition) == (False, ROUND)
    gaps = stats["gapLines"] - 2
    assert metadata_values(check.metadata)["sample"] == [
        f"gapLines: stats say {gaps + 2}, ledger holds {gaps}",
        "stats: fullTranscripts + gapLines != lines",
    ]


def test_integrity_check_run_by_dagster_refuses_a_ledger_it_cannot_read_strictly(
    damaged: tuple[DagsterInstance, dict, Path],
) -> None:
    instance, resources, folder = damaged
    ledger = folder / "rollout-ledger.jsonl"
    raw = ledger.read_bytes().splitlines(keepends=True)
    overflowing = _null_reward_overflowing_a_double(raw)
    not_utf8 = _invalid_utf8_in_a_message(raw)
    _final_newline_removed(raw)
    ledger.write_bytes(b"".join(raw))

    result = run_checks_of(instance, resources, rollout_ledger)

    assert not result.success
    check = evaluations(result)["ledger_lines_valid_and_linked"]
    assert (check.passed, check.severity, check.partition) == (False, AssetCheckSeverity.ERROR, ROUND)
    metadata = metadata_values(check.metadata)
    assert metadata["invalid_lines"] == 3
    why = dict(problem.split(": ", 1) for problem in metadata["sample"])
    assert why.keys() == {f"{ledger}:{n + 1}" for n in (overflowing, not_utf8, len(raw) - 1)}
    assert why[f"{ledger}:{overflowing + 1}"] == "the number 1e400 overflows a double"
    assert why[f"{ledger}:{not_utf8 + 1}"].startswith("not UTF-8 ('utf-8' codec can't decode byte 0xff")
    assert why[f"{ledger}:{len(raw)}"] == "no \\n at the end of the line: the ledger ends mid-line"


def test_order_check_run_by_dagster_fails_alone_on_wrong_parents_and_a_relabeled_gap(
    damaged: tuple[DagsterInstance, dict, Path],
) -> None:
    instance, resources, folder = damaged
    ledger = folder / "rollout-ledger.jsonl"
    lines = read_jsonl(ledger)
    _supervisor_given_a_parent(lines)
    _proposer_given_a_parent(lines)
    _no_session_gap_relabeled_store_unavailable(lines)
    _reward_source_nulled(lines)
    write_jsonl(ledger, lines)

    result = run_checks_of(instance, resources, rollout_ledger)

    assert not result.success
    found = evaluations(result)
    # Every parent is a supervisor line, every line validates: only the order check sees it, and
    # the gap check the "store unavailable" gap of a store the audit reads.
    assert {name for name, e in found.items() if not e.passed} == {
        "every_line_is_its_invocation_in_order",
        "every_gap_is_warranted",
    }
    metadata = metadata_values(found["every_line_is_its_invocation_in_order"].metadata)
    assert (metadata["wrong_roles_or_parents"], metadata["wrong_gaps"], metadata["wrong_reward_sources"]) == (
        2,
        1,
        1,
    )
    assert any(
        "the gap 'no opencode session found for worker cwd " in problem for problem in metadata["sample"]
    )


def test_stats_check_run_by_dagster_fails_on_edited_gap_reasons(
    damaged: tuple[DagsterInstance, dict, Path],
) -> None:
    instance, resources, folder = damaged
    stats_path = folder / "rollout-stats.json"
    stats = json.loads(stats_path.read_text(encoding="utf-8"))
    by_gap = stats["byGapReason"]
    by_gap["opencode_store_unavailable"] = by_gap.pop("no_opencode_session")
    stats_path.write_text(json.dumps(stats), encoding="utf-8")

    result = run_checks_of(instance, resources, rollout_stats)

    assert not result.success
    check = evaluations(result)["stats_reconcile_with_ledger"]
    assert (check.passed, check.partition) == (False, ROUND)
    (problem,) = metadata_values(check.metadata)["sample"]
    assert problem.startswith("byGapReason: stats say ")


# ---------------------------------------------------------------------------
# A failing blocking check stops rollout_stats in a full run
# ---------------------------------------------------------------------------


def test_failing_blocking_check_stops_rollout_stats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A join that loses a line (here: the ledger stage's file loses its last worker line right
    after it is written): the blocking checks fail and stop the round before its stats."""
    layout = write_rounds(tmp_path / "demo")
    lose_a_worker_line_in_the_ledger_stage(monkeypatch)
    ledger_root = tmp_path / "ledgers"
    with instance_for_test() as instance:
        result = materialize_round(instance, round_resources(layout, ledger_root))

    assert not result.success
    failed = {name for name, e in evaluations(result).items() if not e.passed}
    assert failed == {"every_worker_session_accounted_for", "every_line_is_its_invocation_in_order"}
    check = evaluations(result)["every_worker_session_accounted_for"]
    assert metadata_values(check.metadata)["missing_sessions"] == 1
    # The ledger was materialized (and checked); its stats were not.
    assert set(materializations(result)) == {
        "round_manifest", "campaign_cells", "worker_sessions", "proposer_transcripts", "rollout_ledger"
    }  # fmt: skip
    assert "stats_reconcile_with_ledger" not in evaluations(result)
    assert not (ledger_root / ROUND / "rollout-stats.json").exists()
    started = {event.step_key for event in result.all_events if event.event_type_value == "STEP_START"}
    assert "rollout_ledger" in started
    assert "rollout_stats" not in started


def test_a_damaged_round_is_restored_between_tests(damaged: tuple[DagsterInstance, dict, Path]) -> None:
    """Guards the `damaged` fixture itself: earlier tests left no damage behind."""
    instance, resources, _ = damaged
    assert all(e.passed for e in evaluations(run_checks_of(instance, resources, rollout_ledger)).values())


def test_audits_ignore_folders_the_join_does_not_read_as_campaigns_or_receipts(
    tmp_path: Path, lines: list[Line]
) -> None:
    """`gen-0\\n`, `gen-١` (an Arabic-Indic digit) and a receipt name ending in a newline are not
    the loop's names; the join skips them, so the recount must not expect their lines."""
    layout = write_rounds(tmp_path / "demo")
    out_dir = layout.rounds_root / ROUND
    improve = out_dir / "improve-run"
    shutil.copytree(improve / "gen-0", improve / "gen-0\n")
    shutil.copytree(improve / "gen-0", improve / "gen-\u0661")
    shutil.copy(
        out_dir / "proposer-shots" / "gen0-cand0-shot0.json",
        out_dir / "proposer-shots" / "gen0-cand0-shot1.json\n",
    )
    ledger = _ledger(tmp_path, lines)

    assert audit_supervisors(out_dir, ledger).passed
    assert audit_proposers(out_dir, ledger).passed


@pytest.mark.parametrize(
    "audit_ledger",
    [
        lambda out_dir, ledger, demo: audit_supervisors(out_dir, ledger),
        lambda out_dir, ledger, demo: audit_workers(out_dir, ledger, demo.opencode_db),
        lambda out_dir, ledger, demo: audit_proposers(out_dir, ledger),
    ],
    ids=["supervisors", "workers", "proposers"],
)
def test_count_checks_fail_with_file_and_line_on_a_line_missing_its_fields(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout, audit_ledger
) -> None:
    broken = [dict(line) for line in lines]
    del broken[1]["task"]
    del broken[1]["role"]
    ledger = _ledger(tmp_path, broken)
    outcome = audit_ledger(out_dir, ledger, demo)
    assert outcome.passed is False
    assert outcome.details == {"unreadable_lines": 1}
    assert outcome.sample == [f"{ledger}:2: no field role"]


@pytest.mark.parametrize(
    ("audit_ledger", "role", "path"),
    [
        (lambda out_dir, ledger, demo: audit_supervisors(out_dir, ledger), "supervisor", ("task", "instance_id")),
        (
            lambda out_dir, ledger, demo: audit_workers(out_dir, ledger, demo.opencode_db),
            "worker",
            ("outcome", "metrics", "worker_cwd"),
        ),
        (lambda out_dir, ledger, demo: audit_proposers(out_dir, ledger), "proposer", ("task", "rep")),
    ],
    ids=["supervisors", "workers", "proposers"],
)
def test_count_checks_fail_with_file_and_line_on_a_key_that_is_a_list(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout, audit_ledger, role: str, path: tuple[str, ...]
) -> None:
    """A field a count check keys its tally by holds a list: no key, so that check proves
    nothing and says which line (its tally is kept on disk, where a list would fit)."""
    broken = copy.deepcopy(lines)
    index = next(i for i, line in enumerate(broken) if line["role"] == role)
    holder = broken[index]
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = [holder[path[-1]]]
    ledger = _ledger(tmp_path, broken)
    outcome = audit_ledger(out_dir, ledger, demo)
    assert outcome.passed is False
    assert outcome.sample == [f"{ledger}:{index + 1}: a field of the wrong type"]


@pytest.mark.parametrize("workers", [2, 3])
def test_ledger_recount_on_several_processes_equals_one_pass(
    tmp_path: Path, lines: list[Line], out_dir: Path, demo: DemoLayout, workers: int
) -> None:
    """Parts cut at line ends and merged in order give the recount of one pass, problems, line
    numbers and samples included, with breaks in every part."""
    broken = [dict(line) for line in lines]
    del broken[3]["messages"]  # an early line an audit cannot read
    broken[-2]["parent_rollout_id"] = str(uuid.uuid4())  # a late orphan
    broken[len(broken) // 2]["rollout_id"] = broken[0]["rollout_id"]  # a duplicate across parts
    _reward_source_nulled(broken[::-1])  # a late line's reward_source
    last_gap = max(i for i, line in enumerate(broken) if line["provenance"].get("gap"))
    broken[last_gap]["provenance"] = {**broken[last_gap]["provenance"], "gap": "x"}  # a late wrong gap
    ledger = _ledger(tmp_path, broken)
    with ledger.open("ab") as handle:
        handle.write(b"{not json\n")  # and a last line that is not JSON

    one = audit.recount_ledger(ledger, workers=1)
    parts = audit.recount_ledger(ledger, workers=workers, parallel_from_bytes=0)

    inputs = audit.recount_inputs(out_dir, demo.opencode_db)
    for verdict in (
        audit.supervisors_verdict,
        audit.workers_verdict,
        audit.proposers_verdict,
        audit.inputs_match_verdict,
    ):
        assert verdict(inputs, parts) == verdict(inputs, one)
    assert parts.wrong_reward_sources == one.wrong_reward_sources == 1
    assert parts.reward_source_problems == one.reward_source_problems != []
    assert audit.integrity_verdict(parts) == audit.integrity_verdict(one)
    assert audit.integrity_verdict(one).passed is False
    assert {name: str(error) for name, error in parts.unreadable.items()} == {
        name: str(error) for name, error in one.unreadable.items()
    }
    assert (parts.lines, parts.parents, parts.line_problems) == (one.lines, one.parents, one.line_problems)
    assert parts.keys == one.keys and len(one.keys) > len(lines)
    assert str(one.unreadable["stats"]) == f"{ledger}:4: no field messages"


def test_the_audit_opens_a_store_whose_path_holds_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    folder = tmp_path / os.fsdecode(b"store-\xff")
    folder.mkdir()
    db = write_opencode_db(folder / "opencode.db", sessions=[session("s1", "/clones/w0")])

    assert opencode_sessions(db, {"/clones/w0"}) == (True, {"/clones/w0": ["s1"]})


def test_the_audit_imports_neither_the_readers_nor_the_join_it_verifies() -> None:
    """A check that ran the code it checks could not fail: the audit has its own walk, SQL and
    JSON reading, and loads no module of the readers, the join or the stages."""
    verified = ("rollout_assets.sources", "rollout_assets.backfill", "rollout_assets.stages")
    code = f"import sys, rollout_assets.audit; print(sorted(m for m in sys.modules if m.startswith({verified!r})))"
    completed = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert completed.stdout.strip() == "[]"
