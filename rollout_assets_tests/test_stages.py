"""The stored stages of a round, run without Dagster on a real demo round.

The ledger stage copies worker lines by the order their stage recorded instead of parsing
them again, and rollout_stats takes the counters the ledger stage counted: both must refuse
(or recount) when the files no longer belong together, never write a wrong ledger or stats.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from rollout_assets.backfill import parallel
from rollout_assets.backfill.parallel import backfill_to_file
from rollout_assets.demo import DemoLayout
from rollout_assets.ledger import iter_jsonl
from rollout_assets.sources.round.cells import key_check
from rollout_assets.spilled_list import SpilledList
from rollout_assets.stages import loss_guard
from rollout_assets.stages import (
    RoundOutputs,
    StageMismatchError,
    TranscriptLossError,
    WorkerLineRuns,
    read_cell_rows,
    write_campaign_cells,
    write_manifest,
    write_proposer_transcripts,
    write_rollout_ledger,
    write_rollout_stats,
    write_worker_sessions,
)
from rollout_assets_tests.dagster_rounds import ROUND, write_rounds

CAPTURED_AT = "2026-12-02T10:00:00.000Z"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_rounds(tmp_path_factory.mktemp("demo"))


def _stores_of(outputs: RoundOutputs) -> tuple[str, str]:
    """The opencode store and Claude projects folder the stages were built from (their records)."""
    workers = json.loads(outputs.built_from("worker_sessions").read_text())
    proposers = json.loads(outputs.built_from("proposer_transcripts").read_text())
    return workers["opencodeDb"], proposers["claudeProjects"]


def _run_stages(demo: DemoLayout, folder: Path, workers: int) -> RoundOutputs:
    out_dir = demo.rounds_root / ROUND
    outputs = RoundOutputs(folder)
    write_manifest(out_dir, outputs)
    write_campaign_cells(out_dir, outputs, CAPTURED_AT, workers=workers)
    write_worker_sessions(outputs, demo.opencode_db, CAPTURED_AT, workers=workers)
    write_proposer_transcripts(outputs, demo.claude_projects_dir, CAPTURED_AT)
    write_rollout_ledger(outputs, demo.opencode_db, demo.claude_projects_dir)
    write_rollout_stats(outputs)
    return outputs


@pytest.fixture()
def staged(demo: DemoLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RoundOutputs:
    # Units of 3 cells: even a demo campaign is split over the two workers.
    monkeypatch.setattr(parallel, "CELLS_PER_UNIT", 3)
    return _run_stages(demo, tmp_path / "stages-run", workers=2)


def test_stages_on_two_workers_write_the_command_line_ledger_and_stats(
    demo: DemoLayout, staged: RoundOutputs, tmp_path: Path
) -> None:
    single = _run_stages(demo, tmp_path / "one-worker", workers=1)
    _, stats = backfill_to_file(
        demo.rounds_root / ROUND,
        tmp_path / "cli.jsonl",
        opencode_db=demo.opencode_db,
        claude_projects_dir=demo.claude_projects_dir,
        captured_at=CAPTURED_AT,
    )

    assert staged.campaign_cells.read_bytes() == single.campaign_cells.read_bytes()
    # The order of the worker lines by cell, merged from units whose runs continue into the next.
    assert staged.worker_sessions_summary.read_bytes() == single.worker_sessions_summary.read_bytes()
    assert staged.ledger.read_bytes() == single.ledger.read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert json.loads(staged.stats.read_text()) == stats.to_json()


def _record_as_written(outputs: RoundOutputs, stage: str) -> None:
    """Make the stage's record name its files as they are now, as if the stage had written
    them: what a stage with a bug would leave. The ledger stage's own checks must then refuse."""
    from rollout_assets.sources.fingerprint import round_state_digest
    from rollout_assets.stages import file_identity

    path = outputs.built_from(stage)
    record = json.loads(path.read_text())
    if stage == "round_manifest":  # as if the round changed only after the stage checked it
        record.update(
            manifest=file_identity(outputs.manifest),
            manifestHead=file_identity(outputs.manifest_head),
            manifestCells=file_identity(outputs.manifest_cells),
            inputs=round_state_digest(record["outDir"]),
        )
        path.write_text(json.dumps(record))
        return
    files = {
        "campaign_cells": {"cells": outputs.campaign_cells},
        "worker_sessions": {"workerLines": outputs.worker_sessions, "summary": outputs.worker_sessions_summary},
    }[stage]
    record.update({name: file_identity(file) for name, file in files.items()})
    path.write_text(json.dumps(record))
    if stage == "campaign_cells":  # the worker stage was built from that file too
        _record_as_written(outputs, "worker_sessions")
        workers = json.loads(outputs.built_from("worker_sessions").read_text())
        workers["cells"] = record["cells"]
        outputs.built_from("worker_sessions").write_text(json.dumps(workers))


@pytest.mark.parametrize("stage", ["campaign_cells", "worker_sessions"])
def test_ledger_stage_refuses_a_stage_file_changed_after_its_stage_wrote_it(staged: RoundOutputs, stage: str) -> None:
    previous = staged.ledger.read_bytes()
    changed = staged.campaign_cells if stage == "campaign_cells" else staged.worker_sessions
    changed.write_bytes(changed.read_bytes() + b"\n")

    with pytest.raises(StageMismatchError, match=f"^{stage} is out of date .*is not the file it recorded writing"):
        write_rollout_ledger(staged, *_stores_of(staged))
    assert staged.ledger.read_bytes() == previous


def test_ledger_stage_refuses_a_worker_file_its_summary_does_not_describe(staged: RoundOutputs) -> None:
    previous = staged.ledger.read_bytes()
    lines = staged.worker_sessions.read_bytes().splitlines(keepends=True)
    staged.worker_sessions.write_bytes(b"".join(lines[:-1]))
    _record_as_written(staged, "worker_sessions")

    with pytest.raises(StageMismatchError, match="worker-sessions.jsonl is not the file"):
        write_rollout_ledger(staged, *_stores_of(staged))
    assert staged.ledger.read_bytes() == previous


def test_ledger_stage_refuses_worker_lines_that_follow_no_supervisor_in_order(staged: RoundOutputs) -> None:
    previous = staged.ledger.read_bytes()
    rows = staged.campaign_cells.read_bytes().splitlines(keepends=True)
    # A cell row that went missing: its worker lines now follow no supervisor.
    staged.campaign_cells.write_bytes(b"".join(rows[:1] + rows[2:]))
    _record_as_written(staged, "campaign_cells")

    with pytest.raises(StageMismatchError, match="follow no supervisor"):
        write_rollout_ledger(staged, *_stores_of(staged))
    assert staged.ledger.read_bytes() == previous


@pytest.mark.parametrize("change", [1, -1], ids=["more lines recorded than stored", "fewer lines recorded"])
def test_ledger_stage_refuses_a_worker_order_that_does_not_match_the_lines(staged: RoundOutputs, change: int) -> None:
    # Same file, same size, but the recorded order counts one line more (or less) for the
    # last cell: the worker lines cannot be placed, and no ledger is written.
    previous = staged.ledger.read_bytes()
    summary = json.loads(staged.worker_sessions_summary.read_text())
    summary["parents"][-1][1] += change
    staged.worker_sessions_summary.write_text(json.dumps(summary))
    _record_as_written(staged, "worker_sessions")

    with pytest.raises(StageMismatchError, match="follow no supervisor"):
        write_rollout_ledger(staged, *_stores_of(staged))
    assert staged.ledger.read_bytes() == previous


@pytest.mark.parametrize("block", [1 << 20, 3], ids=["whole file in a block", "lines across blocks"])
def test_worker_line_runs_hand_out_whole_lines_as_byte_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(WorkerLineRuns, "BLOCK", block)
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":22}\n{"c":333}\n')
    with WorkerLineRuns(path) as runs:
        assert runs.next_lines(2) == (0, 17)
        assert not runs.at_end()
        assert runs.next_lines(2) == (17, -1)  # one line left, not two
        assert runs.next_lines(1) == (17, 27)
        assert runs.at_end()
        assert runs.next_lines(1) == (27, -1)

    path.write_bytes(b"")
    with WorkerLineRuns(path) as runs:  # a round without worker lines
        assert runs.at_end()
        assert runs.next_lines(1) == (0, -1)


def test_stats_stage_refuses_a_ledger_replaced_after_the_ledger_stage(staged: RoundOutputs) -> None:
    """The checks that let rollout_stats run judged the file rollout_ledger wrote: one cut or
    replaced since (here by `head`, then a move) gets no stats."""
    stats_before = staged.stats.read_bytes()
    lines = staged.ledger.read_bytes().splitlines(keepends=True)
    replacement = staged.ledger.with_name("replacement.jsonl")
    replacement.write_bytes(b"".join(lines[:-1]))
    shutil.move(replacement, staged.ledger)

    with pytest.raises(StageMismatchError, match="changed after rollout_ledger wrote it.*re-materialize rollout_ledger"):
        write_rollout_stats(staged)
    assert staged.stats.read_bytes() == stats_before


@pytest.mark.parametrize(
    "record", ["null", "[]", "{}", '{"ledger": "IDENTITY"}', '{"ledger": "IDENTITY", "counters": {"nope": 1}}']
)
def test_stats_stage_names_a_damaged_record_of_the_ledger(staged: RoundOutputs, record: str) -> None:
    identity = json.dumps(json.loads(staged.ledger_stats.read_text())["ledger"])
    staged.ledger_stats.write_text(record.replace('"IDENTITY"', identity))

    with pytest.raises(StageMismatchError, match="re-materialize rollout_ledger"):
        write_rollout_stats(staged)


def test_stats_stage_takes_the_ledger_stage_counters_when_the_ledger_is_unchanged(staged: RoundOutputs) -> None:
    counted = json.loads(staged.ledger_stats.read_text())
    # Counters the ledger stage did not write would be taken as they are: proof they are reused.
    counted["counters"]["proposer_shots_missed"] = 12345
    staged.ledger_stats.write_text(json.dumps(counted))

    write_rollout_stats(staged)

    assert json.loads(staged.stats.read_text())["proposerShotsMissed"] == 12345


def test_ledger_stage_does_not_fail_once_its_ledger_is_in_place(staged: RoundOutputs) -> None:
    # The record of the ledger it wrote cannot be written (a folder holds its name): the new
    # ledger stands, and rollout_stats, unable to tell it is that ledger, asks for a new one.
    staged.ledger_stats.unlink()
    staged.ledger_stats.mkdir()

    counted = write_rollout_ledger(staged, *_stores_of(staged))

    assert counted.lines == len(staged.ledger.read_bytes().splitlines())
    with pytest.raises(StageMismatchError, match="cannot be read.*re-materialize rollout_ledger"):
        write_rollout_stats(staged)


def _rebuild(demo: DemoLayout, outputs: RoundOutputs, opencode_db: Path, claude: Path) -> None:
    """Every stage again, as a re-materialization of the round does, on these stores."""
    out_dir = demo.rounds_root / ROUND
    write_manifest(out_dir, outputs)
    write_campaign_cells(out_dir, outputs, CAPTURED_AT, workers=1)
    write_worker_sessions(outputs, opencode_db, CAPTURED_AT, workers=1)
    write_proposer_transcripts(outputs, claude, CAPTURED_AT)
    write_rollout_ledger(outputs, opencode_db, claude)


def _full_lines(outputs: RoundOutputs, role: str) -> list[dict]:
    return [line for line in iter_jsonl(outputs.ledger) if line["role"] == role and line["messages"]]


def test_a_rebuild_after_the_store_lost_a_session_keeps_the_ledger_until_it_is_moved_aside(
    demo: DemoLayout, staged: RoundOutputs, tmp_path: Path
) -> None:
    store = Path(shutil.copy(demo.opencode_db, tmp_path / "opencode.db"))
    worker = _full_lines(staged, "worker")[5]
    session_id = worker["artifacts"]["transcript_ref"].removeprefix("opencode:")
    with sqlite3.connect(store) as connection:  # opencode's garbage collection, by plain SQL
        connection.execute("DELETE FROM part WHERE message_id IN (SELECT id FROM message WHERE session_id = ?)", (session_id,))
        connection.execute("DELETE FROM message WHERE session_id = ?", (session_id,))
        connection.execute("DELETE FROM session WHERE id = ?", (session_id,))
    connection.close()
    kept = {path: path.read_bytes() for path in (staged.ledger, staged.stats)}

    with pytest.raises(TranscriptLossError, match=f"would drop or shorten 1 transcript.*opencode:{session_id} .*dropped.*move it aside"):
        _rebuild(demo, staged, store, demo.claude_projects_dir)
    assert {path: path.read_bytes() for path in kept} == kept  # the ledger and its stats stay

    staged.ledger.rename(tmp_path / "kept-aside.jsonl")
    _rebuild(demo, staged, store, demo.claude_projects_dir)
    rebuilt = {line["rollout_id"]: line for line in iter_jsonl(staged.ledger)}
    assert worker["rollout_id"] not in rebuilt
    assert any(
        line["parent_rollout_id"] == worker["parent_rollout_id"]
        and line["outcome"]["metrics"]["worker_cwd"] == worker["outcome"]["metrics"]["worker_cwd"]
        and line["messages"] == []
        for line in rebuilt.values()
    )


def test_a_rebuild_after_a_proposer_transcript_was_deleted_keeps_the_ledger(
    demo: DemoLayout, staged: RoundOutputs, tmp_path: Path
) -> None:
    claude = shutil.copytree(demo.claude_projects_dir, tmp_path / "claude")
    _rebuild(demo, staged, demo.opencode_db, claude)  # the same transcripts, read from the copy
    proposer = _full_lines(staged, "proposer")[0]
    Path(proposer["artifacts"]["transcript_ref"]).unlink()
    kept = staged.ledger.read_bytes()

    name = Path(proposer["artifacts"]["transcript_ref"]).name
    with pytest.raises(TranscriptLossError, match=f"would drop or shorten 1 transcript.*proposer {name} of {proposer['candidate_id']}"):
        _rebuild(demo, staged, demo.opencode_db, claude)
    assert staged.ledger.read_bytes() == kept


def test_a_rebuild_holding_the_same_transcripts_does_not_read_the_ledger(
    demo: DemoLayout, staged: RoundOutputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[Path] = []
    monkeypatch.setattr(loss_guard, "lost_transcripts", lambda path, lines: read.append(path) or [])

    _rebuild(demo, staged, demo.opencode_db, demo.claude_projects_dir)
    assert read == []  # the digests agree
    staged.ledger_stats.unlink()  # a ledger of unknown transcripts is read
    _rebuild(demo, staged, demo.opencode_db, demo.claude_projects_dir)
    assert read == [staged.ledger]


def test_later_stages_refuse_a_manifest_lacking_a_key_this_version_needs(
    demo: DemoLayout, staged: RoundOutputs
) -> None:
    """A manifest head of an older version: one clear sentence, not a KeyError."""
    stored = json.loads(staged.manifest_head.read_bytes())
    for generation in stored["generations"]:
        for rollout in generation["rollouts"]:
            del rollout["outcome"]["judgedCount"]
    staged.manifest_head.write_text(json.dumps(stored))
    _record_as_written(staged, "round_manifest")
    proposers = staged.proposer_transcripts.read_bytes()

    with pytest.raises(StageMismatchError, match="lacks 'judgedCount'.*re-materialize round_manifest"):
        write_proposer_transcripts(staged, demo.claude_projects_dir, CAPTURED_AT)
    with pytest.raises(StageMismatchError, match="lacks 'judgedCount'"):
        write_campaign_cells(demo.rounds_root / ROUND, staged, CAPTURED_AT)
    assert staged.proposer_transcripts.read_bytes() == proposers


def test_manifest_kept_rows_give_the_json_of_a_manifest_read_again(tmp_path: Path) -> None:
    """The manifest stage keeps each cell's row while reading (on disk) instead of reading every
    cell twice; the JSON must be the same, on every demo round (round-003's cells are out of
    order), and so must the file written from it."""
    from rollout_assets.demo import DEFAULT_ROUNDS, write_demo
    from rollout_assets.io import write_json_atomic
    from rollout_assets.sources.round import build_manifest
    from rollout_assets.stages.json_file import write_json_streaming

    layout = write_demo(tmp_path / "demo", DEFAULT_ROUNDS)
    for out_dir in layout.rounds:
        kept, read_again = build_manifest(out_dir, keep_rows=True).to_json(), build_manifest(out_dir).to_json()
        assert kept == read_again
        write_json_streaming(tmp_path / "kept.json", kept)
        write_json_atomic(tmp_path / "read-again.json", read_again)
        assert (tmp_path / "kept.json").read_bytes() == (tmp_path / "read-again.json").read_bytes()
        assert sum(len(r["outcome"]["perInstance"]) for g in kept["generations"] for r in g["rollouts"]) > 0


def test_cells_stage_refuses_a_round_whose_cells_changed_since_the_manifest(tmp_path: Path) -> None:
    from rollout_assets.sources.round import RoundInputError
    from rollout_assets.stages import RoundChangedError

    layout = write_rounds(tmp_path / "demo")
    out_dir = layout.rounds_root / ROUND
    outputs = RoundOutputs(tmp_path / "ledger")
    write_manifest(out_dir, outputs)
    baseline = out_dir / "improve-run" / "baseline"
    first_cell = min(path for path in baseline.iterdir() if (path / "cached-result.json").is_file())

    # A cell that appeared since the manifest stage: its record no longer matches the round.
    shutil.copytree(first_cell, baseline / "zz-new-cell")
    with pytest.raises(RoundChangedError, match="changed since its round_manifest was materialized"):
        write_campaign_cells(out_dir, outputs, CAPTURED_AT)
    # ... or while the stage runs, after its check: the listing no longer matches the manifest.
    _record_as_written(outputs, "round_manifest")
    with pytest.raises(RoundChangedError, match="1 cell\\(s\\) added"):
        write_campaign_cells(out_dir, outputs, CAPTURED_AT)
    shutil.rmtree(baseline / "zz-new-cell")

    # A cell whose file now holds another cell, during the stage: refused when its line is built.
    cache = first_cell / "cached-result.json"
    record = json.loads(cache.read_text())
    record["scenarioId"] = "someone-else__1"
    cache.write_text(json.dumps(record))
    _record_as_written(outputs, "round_manifest")
    with pytest.raises(RoundInputError, match="changed while the round was being read"):
        write_campaign_cells(out_dir, outputs, CAPTURED_AT, workers=1)
    assert not outputs.campaign_cells.exists()


def test_the_manifest_head_and_cell_list_are_the_manifest_without_its_per_cell_lists(
    demo: DemoLayout, staged: RoundOutputs
) -> None:
    """What the stages after round_manifest read instead of manifest.json: the same document
    but for the lists that grow with the cells, and one line a cell in manifest order."""
    whole = json.loads(staged.manifest.read_bytes())
    head = json.loads(staged.manifest_head.read_bytes())
    cells = [json.loads(line) for line in staged.manifest_cells.read_bytes().splitlines()]

    rollouts = [rollout for generation in whole["generations"] for rollout in generation["rollouts"]]
    listed = [
        {"entry": entry, "cell": Path(row["cellPath"]).parent.name, "key": key_check(row["scenarioId"], row["rep"])}
        for entry, rollout in enumerate(rollouts)
        for row in rollout["outcome"]["perInstance"]
    ]
    assert cells == listed and len(cells) == sum(1 for _ in read_cell_rows(staged))
    for rollout in rollouts:
        del rollout["outcome"]["perInstance"], rollout["artifactPaths"], rollout["cost"]["settledCallIds"]
    assert head == whole


@pytest.mark.parametrize("which", ["manifest_head", "manifest_cells"])
def test_later_stages_refuse_a_manifest_head_or_cell_list_rewritten_or_gone(
    demo: DemoLayout, staged: RoundOutputs, which: str
) -> None:
    path = getattr(staged, which)
    cells = staged.campaign_cells.read_bytes()
    path.write_bytes(path.read_bytes() + b"\n")
    with pytest.raises(StageMismatchError, match=f"{path.name} is not the file round_manifest recorded writing"):
        write_campaign_cells(demo.rounds_root / ROUND, staged, CAPTURED_AT)
    with pytest.raises(StageMismatchError, match=f"{path.name} is not the file round_manifest recorded writing"):
        write_proposer_transcripts(staged, demo.claude_projects_dir, CAPTURED_AT)
    path.unlink()
    with pytest.raises(StageMismatchError, match=f"{path.name} does not exist: materialize round_manifest"):
        write_campaign_cells(demo.rounds_root / ROUND, staged, CAPTURED_AT)
    assert staged.campaign_cells.read_bytes() == cells


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[0, \"cell\", 1]",
        b'{"entry": 99, "cell": "x", "key": 1}',
        b'{"entry": -1, "cell": "x", "key": 1}',
        b'{"entry": true, "cell": "x", "key": 1}',
        b'{"entry": 0, "cell": 7, "key": 1}',
        b'{"entry": 0, "cell": "x", "key": 4294967296}',
        b'{"entry": 0, "cell": "x"}',
    ],
)
def test_the_cells_stage_refuses_a_cell_list_line_that_is_no_cell_of_the_manifest(
    demo: DemoLayout, staged: RoundOutputs, line: bytes
) -> None:
    lines = staged.manifest_cells.read_bytes().splitlines(keepends=True)
    lines[1] = line + b"\n"
    staged.manifest_cells.write_bytes(b"".join(lines))
    _record_as_written(staged, "round_manifest")
    cells = staged.campaign_cells.read_bytes()

    with pytest.raises(StageMismatchError, match="manifest-cells.jsonl:2: not a cell of the manifest's"):
        write_campaign_cells(demo.rounds_root / ROUND, staged, CAPTURED_AT)
    assert staged.campaign_cells.read_bytes() == cells


def test_the_cells_stage_names_cells_removed_and_campaigns_gone_since_the_manifest(tmp_path: Path) -> None:
    from rollout_assets.stages import RoundChangedError

    layout = write_rounds(tmp_path / "demo")
    out_dir = layout.rounds_root / ROUND
    outputs = RoundOutputs(tmp_path / "ledger")
    write_manifest(out_dir, outputs)
    campaign = out_dir / "improve-run" / "gen-0" / "candidate-1"
    cells = sorted(path for path in campaign.iterdir() if (path / "cached-result.json").is_file())

    shutil.rmtree(cells[0])
    _record_as_written(outputs, "round_manifest")
    with pytest.raises(RoundChangedError, match=f"0 cell\\(s\\) added \\[\\], 1 removed \\['{cells[0]}/cached-result.json'\\]"):
        write_campaign_cells(out_dir, outputs, CAPTURED_AT)
    shutil.rmtree(campaign)
    _record_as_written(outputs, "round_manifest")
    with pytest.raises(RoundChangedError, match=f"0 cell\\(s\\) added \\[\\], {len(cells)} removed"):
        write_campaign_cells(out_dir, outputs, CAPTURED_AT)


@pytest.mark.parametrize(
    "document",
    [
        {"cells": [{"scenarioId": f"django__django-{n}", "cost": n / 7, "note": "é ✓"} for n in range(3_000)]},
        {"cells": [{"scenarioId": "torn \ud800 escape"}], "empty": [], "nested": {}},  # a lone surrogate
    ],
    ids=["non-ascii", "lone-surrogate"],
)
def test_the_manifest_is_streamed_as_the_same_bytes_as_any_json_output(tmp_path: Path, document: dict) -> None:
    from rollout_assets.io import write_json_atomic
    from rollout_assets.stages.json_file import write_json_streaming

    write_json_atomic(tmp_path / "whole.json", document)
    write_json_streaming(tmp_path / "streamed.json", document)
    # The manifest's per-cell lists come from disk (SpilledList), walked twice with a lone surrogate.
    write_json_streaming(tmp_path / "spilled.json", {**document, "cells": SpilledList(document["cells"])})

    assert (tmp_path / "streamed.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    assert (tmp_path / "spilled.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["spilled.json", "streamed.json", "whole.json"]


def test_a_spilled_list_reads_back_what_was_appended_and_refuses_what_it_cannot_answer() -> None:
    import pickle

    values = [{"scenarioId": "torn \ud800", "rep": 1, "resolved": None, "cost": 0.1}, "path", 1, 1.0, True]
    spilled = SpilledList(values[:2])
    spilled += values[2:]

    assert (len(spilled), list(spilled), list(spilled)) == (5, values, values)  # walked twice
    assert spilled == values and values == spilled and spilled != values[:4] and not SpilledList()
    assert [type(value) for value in spilled] == [dict, str, int, float, bool]
    assert pickle.loads(pickle.dumps(spilled)) == values
    with pytest.raises(TypeError, match="read in order only"):
        spilled[0]


def test_worker_stage_removes_its_snapshot_of_the_store_once_its_lines_are_written(
    demo: DemoLayout, tmp_path: Path, snapshot_folders: Callable[[], list[str]]
) -> None:
    # So the run's later copies and writes do not wait on the disk for its pages (docs/performance.md).
    out_dir, outputs = demo.rounds_root / ROUND, RoundOutputs(tmp_path / "stages-run")
    write_manifest(out_dir, outputs)
    write_campaign_cells(out_dir, outputs, CAPTURED_AT, workers=2)

    while_reading: list[list[str]] = []
    write_worker_sessions(
        outputs, demo.opencode_db, CAPTURED_AT, lambda message: while_reading.append(snapshot_folders()), workers=2
    )

    assert while_reading and all(len(folders) == 1 for folders in while_reading)
    assert snapshot_folders() == []
