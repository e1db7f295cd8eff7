"""A ledger as Inspect eval logs, read back with Inspect itself.

The demo's three rounds are backfilled for real and written as logs; every log is read with
`inspect_ai.log.read_eval_log` (and its summaries with Inspect's summary reader), every sample is
held to Inspect's own models, and `inspect_ai.analysis.samples_df` loads them. Nothing is faked.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas
import pytest
from inspect_ai.analysis import samples_df
from inspect_ai.log import (
    EvalLog,
    EvalSample,
    EvalSampleSummary,
    read_eval_log,
    read_eval_log_sample_summaries,
)
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ContentReasoning

from rollout_assets.inspect_logs import InspectLogsInputError, InspectLogsRefused, stale_reason, write_inspect_logs
from rollout_assets.inspect_logs.index import log_file_name
from rollout_assets.inspect_logs.samples import GAP_INPUT_PREFIX
from rollout_assets_tests.inspect_ledgers import (
    TORN_EMOJI,
    demo_ledgers,
    ledger_lines,
    odd_lines_ledger,
    rewrite_line,
    with_field,
)

ROUNDS = ("round-001", "round-002", "round-003")


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return demo_ledgers(tmp_path_factory.mktemp("inspect"))


@pytest.fixture(scope="module")
def written(ledgers: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each demo round's logs, by round (written once; tests that change them write their own)."""
    root = tmp_path_factory.mktemp("logs")
    for name, ledger in ledgers.items():
        write_inspect_logs(ledger, root / name)
    return {name: root / name for name in ledgers}


def _logs(folder: Path) -> dict[str, EvalLog]:
    return {path.name: read_eval_log(str(path)) for path in sorted(folder.glob("*.eval"))}


def _samples_by_line(folder: Path) -> dict[int, tuple[str, EvalSample]]:
    return {sample.id: (name, sample) for name, log in _logs(folder).items() for sample in log.samples}


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.mark.parametrize("round_name", ROUNDS)
def test_every_log_reads_back_with_inspect_and_holds_exactly_the_ledgers_lines(
    round_name: str, ledgers: dict[str, Path], written: dict[str, Path]
) -> None:
    ledger, folder = ledgers[round_name], written[round_name]
    samples = _samples_by_line(folder)
    lines = dict(ledger_lines(ledger))

    assert sorted(samples) == sorted(lines)  # one sample per line, none more, none less
    expected_logs: dict[str, list[int]] = defaultdict(list)
    for number, line in lines.items():
        log_name, sample = samples[number]
        expected_logs[log_name_of(line)].append(number)
        assert log_name == log_name_of(line)
        assert sample.uuid == line["rollout_id"]
        reward = line["outcome"]["reward"]
        assert (sample.scores["reward"].value if sample.scores else None) == reward
        assert len(sample.messages) == len(line["messages"])
        metadata = sample.metadata
        assert (metadata["line"], metadata["rollout_id"], metadata["run_id"]) == (number, line["rollout_id"], line["run_id"])
        assert (metadata["instance_id"], metadata["rep"], metadata["candidate_id"]) == (
            line["task"]["instance_id"], line["task"]["rep"], line["candidate_id"],
        )  # fmt: skip
        assert (metadata["model"], metadata["cost_usd"], metadata["tokens_in"], metadata["tokens_out"]) == (
            line["policy"]["model"], line["cost"]["usd"], line["cost"]["tokens_in"], line["cost"]["tokens_out"],
        )  # fmt: skip
    logs = _logs(folder)
    assert {name: [sample.id for sample in log.samples] for name, log in logs.items()} == expected_logs
    for name, log in logs.items():
        summaries = read_eval_log_sample_summaries(str(folder / name))
        assert [summary.id for summary in summaries] == expected_logs[name]
        assert [summary.message_count for summary in summaries] == [len(lines[n]["messages"]) for n in expected_logs[name]]
        assert log.status == "success" and log.results.total_samples == len(expected_logs[name])


def log_name_of(line: dict[str, Any]) -> str:
    return log_file_name(line["role"], line["candidate_id"])


def test_the_logs_are_one_per_role_and_candidate_listed_in_ledger_order(
    ledgers: dict[str, Path], written: dict[str, Path]
) -> None:
    first_lines: dict[str, int] = {}
    for number, line in ledger_lines(ledgers["round-001"]):
        first_lines.setdefault(log_name_of(line), number)
    folder = written["round-001"]
    listed = sorted((path.name for path in folder.glob("*.eval")), key=lambda name: -os.stat(folder / name).st_mtime_ns)

    # The viewer lists the newest first: the logs are dated so that it lists them in ledger order.
    assert listed == sorted(first_lines, key=first_lines.__getitem__)
    assert {"supervisor-baseline.eval", "worker-baseline.eval", "proposer-gen0-cand1.eval", "agent-gen0-cand1.eval"} <= set(listed)


def test_tool_calls_and_their_results_are_inspects_chat_messages(
    ledgers: dict[str, Path], written: dict[str, Path]
) -> None:
    samples = _samples_by_line(written["round-001"])
    number, line = next((n, line) for n, line in ledger_lines(ledgers["round-001"]) if line["role"] == "worker" and line["messages"])
    messages = samples[number][1].messages
    calls = 0
    for ledger_message, message in zip(line["messages"], messages, strict=True):
        assert message.role == ledger_message["role"]
        if ledger_message.get("tool_calls"):
            assert isinstance(message, ChatMessageAssistant)
            assert [(call.id, call.function, call.arguments) for call in message.tool_calls] == [
                (call["id"], call["function"]["name"], json.loads(call["function"]["arguments"]))
                for call in ledger_message["tool_calls"]
            ]
            calls += len(message.tool_calls)
        if ledger_message.get("reasoning_content"):
            assert isinstance(message.content[0], ContentReasoning)
            assert message.content[0].reasoning == ledger_message["reasoning_content"]
        if ledger_message["role"] == "tool":
            assert isinstance(message, ChatMessageTool)
            assert (message.tool_call_id, message.function, message.text) == (
                ledger_message["tool_call_id"], ledger_message.get("name"), ledger_message["content"] or "",
            )  # fmt: skip
    assert calls > 0


def test_a_gap_line_is_a_sample_without_messages_that_says_why(
    ledgers: dict[str, Path], written: dict[str, Path]
) -> None:
    samples = _samples_by_line(written["round-001"])
    gaps = [(n, line) for n, line in ledger_lines(ledgers["round-001"]) if not line["messages"]]
    assert {line["role"] for _, line in gaps} >= {"supervisor", "worker", "proposer"}
    for number, line in gaps:
        sample = samples[number][1]
        assert sample.messages == []
        assert sample.input == GAP_INPUT_PREFIX + line["provenance"]["gap"]
        assert sample.metadata["gap"] == line["provenance"]["gap"]


def test_sub_agent_lines_name_their_proposer(ledgers: dict[str, Path], written: dict[str, Path]) -> None:
    samples = _samples_by_line(written["round-001"])
    agents = [(n, line) for n, line in ledger_lines(ledgers["round-001"]) if line["role"] == "agent"]
    assert agents
    for number, line in agents:
        metadata = samples[number][1].metadata
        proposer_log, proposer = samples[metadata["proposer_line"]]
        assert metadata["proposer_rollout_id"] == line["parent_rollout_id"] == proposer.uuid
        assert proposer_log == log_file_name("proposer", line["candidate_id"])
    workers = [(n, line) for n, line in ledger_lines(ledgers["round-001"]) if line["role"] == "worker"]
    for number, line in workers:  # a worker names its supervisor's line the same way
        assert samples[samples[number][1].metadata["parent_line"]][1].uuid == line["parent_rollout_id"]


def test_a_null_reward_gives_no_score_and_the_mean_counts_only_scored_samples(
    ledgers: dict[str, Path], written: dict[str, Path]
) -> None:
    lines = dict(ledger_lines(ledgers["round-001"]))
    unscored = [n for n, line in lines.items() if line["outcome"]["reward"] is None]
    assert unscored
    samples = _samples_by_line(written["round-001"])
    assert all(samples[n][1].scores is None for n in unscored)
    for name, log in _logs(written["round-001"]).items():
        rewards = [lines[s.id]["outcome"]["reward"] for s in log.samples if lines[s.id]["outcome"]["reward"] is not None]
        scores = {score.name: score for score in log.results.scores}
        if not rewards:
            assert scores == {}
            continue
        score = scores["reward"]
        assert (score.scored_samples, score.unscored_samples) == (len(rewards), len(log.samples) - len(rewards))
        assert score.metrics["mean"].value == pytest.approx(sum(rewards) / len(rewards))


@pytest.mark.parametrize("round_name", ROUNDS)
def test_every_sample_summary_and_header_is_what_inspects_own_models_write(
    round_name: str, written: dict[str, Path]
) -> None:
    for path in sorted(written[round_name].glob("*.eval")):
        for name, data in _members(path).items():
            if name.startswith("samples/"):
                # Validated by Inspect and dumped again, the sample is the same bytes.
                again = EvalSample.model_validate_json(data).model_dump_json(exclude_none=True)
                assert again.encode("utf-8") == data, (path.name, name)
        written_summaries = json.loads(_members(path)["summaries.json"])
        assert [EvalSampleSummary.model_validate(dict(s)).model_dump(mode="json", exclude_none=True) for s in written_summaries] == written_summaries
        header = json.loads(_members(path)["header.json"])
        assert EvalLog.model_validate(dict(header)).model_dump(mode="json", exclude_none=True) == header


def test_samples_df_loads_every_line(ledgers: dict[str, Path], written: dict[str, Path]) -> None:
    frame = samples_df(str(written["round-001"]))
    lines = dict(ledger_lines(ledgers["round-001"]))

    assert len(frame) == len(lines)
    assert sorted(frame["metadata_line"]) == sorted(lines)
    by_line = frame.set_index("metadata_line")
    for number, line in lines.items():
        assert by_line.loc[number, "metadata_rollout_id"] == line["rollout_id"]
        reward = by_line.loc[number, "score_reward"]
        assert (None if pandas.isna(reward) else reward) == line["outcome"]["reward"]  # NA: no score


def test_the_same_ledger_gives_the_same_bytes_for_any_number_of_processes(
    ledgers: dict[str, Path], written: dict[str, Path], tmp_path: Path
) -> None:
    ledger = ledgers["round-002"]
    write_inspect_logs(ledger, tmp_path / "again", workers=1)
    write_inspect_logs(ledger, tmp_path / "forked", workers=2, parallel_from_bytes=0)
    first = {path.name: path.read_bytes() for path in written["round-002"].glob("*.eval")}

    assert {path.name: path.read_bytes() for path in (tmp_path / "again").glob("*.eval")} == first
    assert {path.name: path.read_bytes() for path in (tmp_path / "forked").glob("*.eval")} == first
    # Its times are the ledger's: the header says when the lines were captured.
    captured = sorted({line["provenance"]["captured_at"] for _, line in ledger_lines(ledger)})
    header = read_eval_log(str(written["round-002"] / "worker-baseline.eval"), header_only=True)
    assert header.stats.started_at == header.eval.created == _iso(captured[0])


def _iso(captured_at: str) -> str:
    from datetime import datetime

    return datetime.fromisoformat(captured_at).isoformat()


def test_a_ledger_written_in_another_key_order_gives_the_same_samples(
    ledgers: dict[str, Path], written: dict[str, Path], tmp_path: Path
) -> None:
    ledger = tmp_path / "sorted.jsonl"
    with open(ledgers["round-001"], encoding="utf-8") as source, open(ledger, "w", encoding="utf-8") as target:
        target.writelines(json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False) + "\n" for line in source)
    write_inspect_logs(ledger, tmp_path / "logs")

    again = {n: (name, sample.model_dump()) for n, (name, sample) in _samples_by_line(tmp_path / "logs").items()}
    assert again == {n: (name, sample.model_dump()) for n, (name, sample) in _samples_by_line(written["round-001"]).items()}


def test_a_line_whose_role_is_written_twice_is_refused(ledgers: dict[str, Path], tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(ledgers["round-001"].read_bytes())
    text = ledger.read_text(encoding="utf-8").splitlines()[0]
    rewrite_line(ledger, 1, text.replace('"role":"supervisor",', '"role":"supervisor","role":"worker",', 1))

    with pytest.raises(InspectLogsInputError, match=f"^{ledger}:1: its role or candidate_id reads two ways"):
        write_inspect_logs(ledger, tmp_path / "logs")


def test_lines_the_demo_lacks_are_samples_too(tmp_path: Path) -> None:
    ledger = odd_lines_ledger(tmp_path / "odd.jsonl")
    write_inspect_logs(ledger, tmp_path / "logs")
    samples = _samples_by_line(tmp_path / "logs")

    assert sorted(samples) == [1, 2, 3]
    torn = samples[2][1]
    assert torn.scores is None and torn.metadata["reward"] is None
    assert torn.error.message == "APIError: Overloaded"
    assert torn.messages[2].text == TORN_EMOJI.encode("utf-8", "backslashreplace").decode()  # as Inspect writes it
    call = torn.messages[1].tool_calls[0]
    assert (call.arguments, call.parse_error) == ({}, "arguments are not a JSON object: [1, 2")
    assert samples[3][0] == log_file_name("supervisor", "gen0/cand 1")
    assert samples[3][0].startswith("supervisor-gen0_cand_1-") and "/" not in samples[3][0]


def test_a_line_that_is_not_json_names_its_line_and_leaves_the_logs_as_they_were(
    ledgers: dict[str, Path], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(ledgers["round-001"].read_bytes())
    folder = tmp_path / "logs"
    write_inspect_logs(ledger, folder)
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    rewrite_line(ledger, 40, '{"schema": "tangle.rollout.v1", "rollout_id": ')

    with pytest.raises(InspectLogsInputError) as raised:
        write_inspect_logs(ledger, folder)

    assert str(raised.value).startswith(f"{ledger}:40: invalid JSON")
    assert "\n" not in str(raised.value)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ledger.jsonl", "logs"]  # no build folder left


@pytest.mark.parametrize("workers", [1, 2])
def test_a_line_the_schema_refuses_is_the_first_such_line_for_any_number_of_processes(
    ledgers: dict[str, Path], tmp_path: Path, workers: int
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(ledgers["round-002"].read_bytes())
    # Bad lines in two logs, and a later line that is no JSON, which the first pass meets first:
    # whichever process meets which first, the ledger's first bad line is named.
    rewrite_line(ledger, 700, with_field(ledger, 700, "outcome.reward", "0.9"))
    rewrite_line(ledger, 30, with_field(ledger, 30, "task.rep", "1"))
    rewrite_line(ledger, 720, "{")

    with pytest.raises(InspectLogsInputError) as raised:
        write_inspect_logs(ledger, tmp_path / "logs", workers=workers, parallel_from_bytes=0)

    message = str(raised.value)
    assert message.startswith(f"{ledger}:30: rollout ") and "task.rep" in message and "\n" not in message
    assert not (tmp_path / "logs").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ledger.jsonl"]


def test_a_line_refused_after_logs_were_written_leaves_the_earlier_logs_in_place(
    ledgers: dict[str, Path], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(ledgers["round-002"].read_bytes())
    folder = tmp_path / "logs"
    write_inspect_logs(ledger, folder)
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    # Valid JSON, so the first pass takes it: the log's own pass refuses it, logs already written.
    rewrite_line(ledger, 740, with_field(ledger, 740, "outcome.reward", "0.9"))

    with pytest.raises(InspectLogsInputError, match=f"^{ledger}:740: rollout .*outcome.reward"):
        write_inspect_logs(ledger, folder)

    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ledger.jsonl", "logs"]


def test_a_folder_holding_other_files_or_the_ledger_is_refused(ledgers: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")

    with pytest.raises(InspectLogsRefused, match="holds files that are no Inspect logs of a ledger \\(notes.txt\\)"):
        write_inspect_logs(ledgers["round-001"], folder)
    with pytest.raises(InspectLogsRefused, match="it holds the ledger"):
        write_inspect_logs(ledgers["round-001"], ledgers["round-001"].parent)
    assert (folder / "notes.txt").read_text() == "mine"


def test_logs_are_stale_once_the_ledger_changes_or_a_log_is_gone(ledgers: dict[str, Path], tmp_path: Path) -> None:
    ledger = tmp_path / "rollout-ledger.jsonl"
    ledger.write_bytes(ledgers["round-001"].read_bytes())
    folder = tmp_path / "inspect-logs"
    assert stale_reason(ledger, folder) == "no logs written yet"

    write_inspect_logs(ledger, folder)
    assert stale_reason(ledger, folder) is None

    ledger.write_bytes(ledger.read_bytes())  # the same bytes, rewritten: its identity changed
    assert stale_reason(ledger, folder) == "the ledger changed since they were written"
    write_inspect_logs(ledger, folder)
    (folder / "worker-baseline.eval").unlink()
    assert stale_reason(ledger, folder) == "worker-baseline.eval is missing"


def test_an_empty_ledger_gives_an_empty_folder(tmp_path: Path) -> None:
    ledger = tmp_path / "empty.jsonl"
    ledger.write_bytes(b"")

    report = write_inspect_logs(ledger, tmp_path / "logs")

    assert (report.lines, report.logs) == (0, [])
    assert sorted(path.name for path in (tmp_path / "logs").iterdir()) == ["built-from.json"]
