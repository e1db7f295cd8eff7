"""Per-worker identifiers normalized in the training rows, pairs and groups that form across
workers, `group_by`, `max_tokens` with a tokenizer, and the checks that recount all of it.

The ledgers are real files written with the ledger writer. Each worker line is what a round
gives: its prompt names the worker and its own clone, its tool calls and outputs repeat that
path (in JSON arguments too, escaped as JSON may escape it), its session id is in the text,
and the same task recurs across reps and candidates in clones of different names.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_assets.cli import main as cli
from rollout_assets.ledger import write_ledger
from rollout_assets.training import TrainingFilter, export_training
from rollout_assets.training.files import TrainingFiles
from rollout_assets.training.verify import (
    check_accounting,
    check_identifiers_normalized,
    check_rows_match_ledger,
    verify_training,
)
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line

CLONES = "/tmp/loops-run-7f3a"
INSTANCE = "django__django-11532"
TOUCHED = "django/core/mail/message.py"


def _id(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def worker_line(
    name: str, reward: float | None, *, rep: int = 0, candidate: str = "gen0-cand1", task: str = "Patch the root cause"
) -> dict[str, Any]:
    """A worker in its own clone `CLONES/<name>`, its session id in the text, as a round has it."""
    cwd, session = f"{CLONES}/{name}", f"ses_{uuid.uuid5(uuid.NAMESPACE_URL, name).hex[:26]}"
    run_dir = f"/rounds/r9/runs/{candidate}/{INSTANCE}__rep{rep}"
    line = sample_worker_line(rollout_id=_id(name), candidate_id=candidate)
    line["task"].update(instance_id=INSTANCE, rep=rep)
    line["outcome"].update(reward=reward, reward_source=None if reward is None else "swe-arena-official-judge/inherited")
    line["outcome"]["metrics"]["worker_cwd"] = cwd
    line["artifacts"].update(run_dir=run_dir, transcript_ref=f"opencode:{session}")
    grep_arguments = json.dumps({"pattern": "_resolve", "path": cwd}, separators=(",", ":"))
    # Some harnesses escape `/` in JSON: the same path, spelled `\/tmp\/...`.
    read_arguments = json.dumps({"filePath": f"{cwd}/{TOUCHED}"}).replace("/", "\\/")
    line["messages"] = [
        {
            "role": "user",
            "content": f"You are worker {name} on {INSTANCE}. Your subtask: {task}. Work only inside {cwd}.\n"
            f"<context>\nrepository clone: {cwd}\nopencode session: {session}\nrun folder: {run_dir}\n</context>",
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": f"{name} should look at {TOUCHED} first.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": grep_arguments}},
                {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": read_arguments}},
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "name": "grep",
            # The clone of another, older worker shares the prefix: it is no identifier of this line.
            "content": f"Found matches\n{cwd}/{TOUCHED}:281: def _resolve(self, value):\n"
            f"{cwd}-old/{TOUCHED}:12: def _resolve(self, value):",
        },
        {"role": "tool", "tool_call_id": "call_2", "name": "read", "content": "<file>\n00281| def _resolve(self, value):\n</file>"},
        {"role": "assistant", "content": f"Patched {cwd}/{TOUCHED} ({'it works' if reward else 'still failing'})."},
    ]
    return line


WORKERS = [  # (name, reward, rep, candidate): one task, six clones of their own
    ("loops-w-0-ogcj3k", 1.0, 0, "gen0-cand1"),
    ("loops-w-0-p2xq7d", 0.0, 1, "gen0-cand1"),
    ("loops-w-0-zz81ka", 1.0, 2, "gen0-cand1"),
    ("loops-w-0-4rmb0t", 0.0, 0, "gen0-cand2"),
    ("loops-w-0-h7ty2e", 1.0, 1, "gen0-cand2"),
    ("loops-w-0-bq00nz", None, 2, "gen0-cand2"),
]


def _ledger(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "round-009" / "rollout-ledger.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_ledger(path, lines)
    return path


@pytest.fixture
def round_ledger(tmp_path: Path) -> Path:
    lines = [sample_line()]
    lines += [worker_line(name, reward, rep=rep, candidate=candidate) for name, reward, rep, candidate in WORKERS]
    return _ledger(tmp_path, lines)


def _rows(files: TrainingFiles, dataset: str) -> list[dict[str, Any]]:
    return pq.read_table(files.parquet(dataset)).to_pylist()


def _fates(files: TrainingFiles, dataset: str) -> dict[str, str]:
    rows = [json.loads(raw) for raw in files.accounting(dataset).read_text().splitlines()]
    return {row["rollout_id"]: row["fate"] for row in rows}


def _raw_identifiers(name: str) -> list[str]:
    line = worker_line(name, 1.0)
    return [f"{CLONES}/{name}", name, line["artifacts"]["transcript_ref"].removeprefix("opencode:"),
            line["artifacts"]["run_dir"]]  # fmt: skip


# ---------------------------------------------------------------------------
# normalization
# ---------------------------------------------------------------------------


def test_pairs_and_groups_form_across_clones_only_once_identifiers_are_normalized(
    round_ledger: Path, tmp_path: Path
) -> None:
    raw = export_training(round_ledger, tmp_path / "raw", "round-009", TrainingFilter(normalize_identifiers=False))
    assert (raw.reports["preference_pairs"].rows, raw.reports["grpo_groups"].rows) == (0, 0)
    assert raw.reports["preference_pairs"].drops["prompt_mismatch"] == 5  # the five rewarded workers

    export = export_training(round_ledger, tmp_path / "training", "round-009")
    pairs, groups = _rows(export.files, "preference_pairs"), _rows(export.files, "grpo_groups")
    # Rewards 1, 0, 1, 0, 1 in one bucket: best against worst twice, the middle one left over.
    assert [(p["metadata"]["chosen_rollout_id"], p["metadata"]["rejected_rollout_id"]) for p in pairs] == [
        (_id("loops-w-0-ogcj3k"), _id("loops-w-0-4rmb0t")),
        (_id("loops-w-0-zz81ka"), _id("loops-w-0-p2xq7d")),
    ]
    assert len(groups) == 1 and groups[0]["rewards"] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert groups[0]["prompt"][0]["content"] == (
        "You are worker <WORKER> on django__django-11532. Your subtask: Patch the root cause. Work only "
        "inside /workspace.\n<context>\nrepository clone: /workspace\nopencode session: <SESSION>\n"
        "run folder: <RUN_DIR>\n</context>"
    )
    assert [p["metadata"]["group_by"] for p in pairs] == ["prompt", "prompt"]
    report = json.loads(export.files.report_json.read_text())
    assert (report["filter"]["normalize_identifiers"], report["filter"]["group_by"]) == (True, "prompt")
    assert all(verdict.passed for verdict in verify_training(round_ledger, export.files, 0.05).values())


def test_no_row_holds_a_workers_clone_name_session_or_run_folder(round_ledger: Path, tmp_path: Path) -> None:
    files = export_training(round_ledger, tmp_path / "training", "round-009").files
    for dataset in ("sft_rows", "preference_pairs", "grpo_groups"):
        text = json.dumps(_rows(files, dataset))
        for name, *_ in WORKERS:
            for identifier in _raw_identifiers(name):
                assert json.dumps(identifier)[1:-1] not in text.replace(f"{name}-old", ""), (dataset, identifier)
    assert files.sft_jsonl.read_text().count("/workspace") > 0


def test_a_call_and_its_output_name_the_same_placeholder_path(round_ledger: Path, tmp_path: Path) -> None:
    files = export_training(round_ledger, tmp_path / "training", "round-009").files
    messages = _rows(files, "sft_rows")[0]["messages"]
    grep, read = messages[1]["tool_calls"]
    assert json.loads(grep["function"]["arguments"]) == {"pattern": "_resolve", "path": "/workspace"}
    # The escaped spelling is replaced escaped: the arguments stay JSON and name the same file.
    assert read["function"]["arguments"] == '{"filePath": "\\/workspace\\/django\\/core\\/mail\\/message.py"}'
    assert json.loads(read["function"]["arguments"]) == {"filePath": f"/workspace/{TOUCHED}"}
    output = messages[2]["content"].splitlines()
    assert output[1] == f"/workspace/{TOUCHED}:281: def _resolve(self, value):"
    # A folder that merely shares the clone's prefix is left alone.
    assert output[2] == f"{CLONES}/loops-w-0-ogcj3k-old/{TOUCHED}:12: def _resolve(self, value):"
    assert messages[1]["reasoning_content"] == f"<WORKER> should look at {TOUCHED} first."


def test_each_row_records_what_was_replaced(round_ledger: Path, tmp_path: Path) -> None:
    files = export_training(round_ledger, tmp_path / "training", "round-009").files
    sft = _rows(files, "sft_rows")[0]["metadata"]
    # The clone: prompt twice, grep arguments and output, read arguments (escaped), the answer.
    assert sft["replacements"] == [
        {"kind": "working_folder", "placeholder": "/workspace", "count": 6},
        {"kind": "worker_name", "placeholder": "<WORKER>", "count": 2},
        {"kind": "run_folder", "placeholder": "<RUN_DIR>", "count": 1},
        {"kind": "session", "placeholder": "<SESSION>", "count": 1},
    ]
    pair = _rows(files, "preference_pairs")[0]["metadata"]
    assert pair["chosen_replacements"] == pair["rejected_replacements"] == sft["replacements"]
    group = _rows(files, "grpo_groups")[0]["metadata"]
    assert group["replacements"] == [sft["replacements"]] * 5
    off = export_training(round_ledger, tmp_path / "off", "round-009", TrainingFilter(normalize_identifiers=False))
    assert _rows(off.files, "sft_rows")[0]["metadata"]["replacements"] == []


def test_the_ledger_keeps_what_the_model_saw(round_ledger: Path, tmp_path: Path) -> None:
    before = round_ledger.read_bytes()
    export_training(round_ledger, tmp_path / "training", "round-009")
    assert round_ledger.read_bytes() == before and before.count(b"loops-w-0-ogcj3k") > 5


def test_a_non_ascii_clone_escaped_as_json_escapes_it(tmp_path: Path) -> None:
    name = "loops-w-1-café9"
    line = worker_line(name, 1.0)
    ascii_arguments = json.dumps({"path": f"{CLONES}/{name}"})  # ensure_ascii: "caf\u00e9"
    line["messages"][1]["tool_calls"][0]["function"]["arguments"] = ascii_arguments
    ledger = _ledger(tmp_path, [line])
    files = export_training(ledger, tmp_path / "training", "round-009").files
    call = _rows(files, "sft_rows")[0]["messages"][1]["tool_calls"][0]
    assert call["function"]["arguments"] == '{"path": "/workspace"}'
    assert all(verdict.passed for verdict in verify_training(ledger, files, 0.05).values())


def test_proposer_worktree_and_claude_session_are_replaced(tmp_path: Path) -> None:
    worktree, session = "/rounds/r9/proposer-wt/gen0-cand1", "3f1c2a9e-8d7b-4c6a-9e5f-1a2b3c4d5e6f"
    proposer = sample_worker_line(rollout_id=_id("proposer"), role="proposer", parent_rollout_id=None)
    proposer["outcome"]["metrics"] = {"resolved_count": 1, "instance_count": 2}
    proposer["artifacts"].update(run_dir=worktree, transcript_ref=f"/home/u/.claude/projects/x/{session}.jsonl")
    proposer["messages"][0]["content"] = f"Edit the profile in {worktree}/profiles/swe (session {session})."
    files = export_training(_ledger(tmp_path, [proposer]), tmp_path / "training", "round-009").files
    row = _rows(files, "sft_rows")[0]
    assert row["messages"][0]["content"] == "Edit the profile in /workspace/profiles/swe (session <SESSION>)."


# ---------------------------------------------------------------------------
# group_by
# ---------------------------------------------------------------------------


def _two_tasks(tmp_path: Path) -> Path:
    """One instance, two subtasks: the prompts differ in the task itself, not only the clone."""
    lines = [worker_line(name, reward, rep=rep, candidate=candidate) for name, reward, rep, candidate in WORKERS[:3]]
    lines.append(worker_line("loops-w-1-aa11bb", 0.0, rep=0, task="Run the regression suite"))
    return _ledger(tmp_path, lines)


def test_group_by_instance_joins_every_line_of_the_instance(tmp_path: Path) -> None:
    ledger = _two_tasks(tmp_path)
    by_prompt = export_training(ledger, tmp_path / "prompt", "round-009")
    assert _fates(by_prompt.files, "grpo_groups")[_id("loops-w-1-aa11bb")] == "prompt_mismatch"

    settings = TrainingFilter(group_by="instance")
    export = export_training(ledger, tmp_path / "instance", "round-009", settings)
    (group,) = _rows(export.files, "grpo_groups")
    assert group["rollout_ids"] == [_id(n) for n in ("loops-w-0-ogcj3k", "loops-w-0-p2xq7d", "loops-w-0-zz81ka", "loops-w-1-aa11bb")]
    assert group["prompt"] == []  # nothing before the first user message is shared
    firsts = [completion[0]["content"].split(". Work")[0] for completion in group["completions"]]
    assert firsts == ["You are worker <WORKER> on django__django-11532. Your subtask: Patch the root cause"] * 3 + [
        "You are worker <WORKER> on django__django-11532. Your subtask: Run the regression suite"
    ]
    assert group["metadata"]["group_by"] == "instance"
    pairs = _rows(export.files, "preference_pairs")
    assert [p["metadata"]["rejected_rollout_id"] for p in pairs] == [_id("loops-w-1-aa11bb"), _id("loops-w-0-p2xq7d")]
    # Across two tasks each side keeps its own prompt; within one, the prompt is shared.
    assert (pairs[0]["prompt"], pairs[0]["chosen"][0]["role"], pairs[0]["rejected"][0]["role"]) == ([], "user", "user")
    assert (len(pairs[1]["prompt"]), pairs[1]["chosen"][0]["role"]) == (1, "assistant")
    report = json.loads(export.files.report_json.read_text())
    assert report["filter"]["group_by"] == "instance"
    assert all(verdict.passed for verdict in verify_training(ledger, export.files, 0.05).values())


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="group_by must be prompt or instance"):
        TrainingFilter(group_by="task")
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        TrainingFilter(max_tokens=0)


# ---------------------------------------------------------------------------
# max_tokens and the tokenizer
# ---------------------------------------------------------------------------


def _tokenizer_file(tmp_path: Path) -> Path:
    """A tiny word-level tokenizer.json built with the tokenizers library: one token per word
    or punctuation mark it knows, [UNK] for the rest."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocabulary = {"[UNK]": 0, "You": 1, "are": 2, "worker": 3, "Patched": 4, "/": 5, ".": 6}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_max_tokens_drops_long_lines_with_the_estimate(round_ledger: Path, tmp_path: Path) -> None:
    every_line = TrainingFilter(min_reward=-1.0, per_instance_cap=10)
    files = export_training(round_ledger, tmp_path / "all", "round-009", every_line).files
    tokens = {row["metadata"]["rollout_id"]: row["tokens"] for row in _rows(files, "sft_rows")}
    longest = max(tokens.values())  # the failing workers' answers are longer
    settings = TrainingFilter(max_tokens=longest - 1, min_reward=-1.0, per_instance_cap=10)
    export = export_training(round_ledger, tmp_path / "capped", "round-009", settings)
    fates = _fates(export.files, "sft_rows")
    too_long = {rollout_id for rollout_id, fate in fates.items() if fate == "too_long"}
    assert too_long == {rid for rid, count in tokens.items() if count == longest}
    # A line without a reward is dropped for that first, however long it is.
    assert fates[_id("loops-w-0-bq00nz")] == "no_reward"
    assert all(row["metadata"]["token_counter"] == "estimate" for row in _rows(export.files, "sft_rows"))
    assert export.reports["grpo_groups"].drops["too_long"] == len(too_long)
    assert all(v.passed for v in verify_training(round_ledger, export.files, 0.05).values())


def test_a_tokenizer_json_counts_the_tokens(round_ledger: Path, tmp_path: Path) -> None:
    tokenizer = _tokenizer_file(tmp_path)
    settings = TrainingFilter(tokenizer=str(tokenizer))
    export = export_training(round_ledger, tmp_path / "training", "round-009", settings)
    row = _rows(export.files, "sft_rows")[0]
    assert row["metadata"]["token_counter"] == "tokenizer"
    from tokenizers import Tokenizer

    counted = Tokenizer.from_file(str(tokenizer))
    texts = [m["content"] for m in row["messages"] if m["content"]] + [row["messages"][1]["reasoning_content"]]
    texts += [part for call in row["messages"][1]["tool_calls"] for part in (call["function"]["name"], call["function"]["arguments"])]
    assert row["tokens"] == sum(len(counted.encode(text, add_special_tokens=False).ids) for text in texts)
    # Words and marks, not bytes / 4: the estimate of the same row is another number.
    estimate = export_training(round_ledger, tmp_path / "estimate", "round-009").files
    assert row["tokens"] != _rows(estimate, "sft_rows")[0]["tokens"]
    limited = TrainingFilter(tokenizer=str(tokenizer), max_tokens=row["tokens"])
    files = export_training(round_ledger, tmp_path / "limited", "round-009", limited).files
    assert _fates(files, "sft_rows")[row["metadata"]["rollout_id"]] == "row"
    assert all(v.passed for v in verify_training(round_ledger, files, 0.05).values())


def test_an_unreadable_tokenizer_is_one_sentence(round_ledger: Path, tmp_path: Path) -> None:
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not a tokenizer")
    with pytest.raises(ValueError, match=r"tokenizer .*tokenizer.json: not a readable tokenizer.json"):
        export_training(round_ledger, tmp_path / "training", "round-009", TrainingFilter(tokenizer=str(broken)))
    with pytest.raises(ValueError, match="No such file"):
        export_training(round_ledger, tmp_path / "training", "round-009", TrainingFilter(tokenizer=str(tmp_path / "nope")))


# ---------------------------------------------------------------------------
# the checks, each shown failing on a broken output
# ---------------------------------------------------------------------------


def _rewrite_rows(path: Path, change) -> None:
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def _exported(round_ledger: Path, tmp_path: Path, settings: TrainingFilter | None = None) -> TrainingFiles:
    files = export_training(round_ledger, tmp_path / "training", "round-009", settings).files
    for name, verdict in verify_training(round_ledger, files, 0.05).items():
        assert verdict.passed, (name, verdict.problems)
    return files


def test_the_identifiers_check_fails_on_a_row_that_still_holds_its_clone(round_ledger: Path, tmp_path: Path) -> None:
    files = _exported(round_ledger, tmp_path)

    def put_back(rows):
        rows[0]["messages"][2]["content"] = rows[0]["messages"][2]["content"].replace("/workspace", f"{CLONES}/loops-w-0-ogcj3k")

    _rewrite_rows(files.parquet("sft_rows"), put_back)
    verdict = check_identifiers_normalized(round_ledger, files, "sft_rows")
    assert not verdict.passed and verdict.problems == [
        f"row 1 ({_id('loops-w-0-ogcj3k')}): still holds its line's working folder"
    ]
    assert not check_rows_match_ledger(round_ledger, files, "sft_rows").passed


def test_the_identifiers_check_fails_on_an_output_under_another_placeholder(round_ledger: Path, tmp_path: Path) -> None:
    files = _exported(round_ledger, tmp_path)

    def swap(rows):
        for completion in rows[0]["completions"]:
            completion[1]["content"] = completion[1]["content"].replace("/workspace/", "<RUN_DIR>/", 1)

    _rewrite_rows(files.parquet("grpo_groups"), swap)
    verdict = check_identifiers_normalized(round_ledger, files, "grpo_groups")
    assert not verdict.passed
    assert verdict.problems[0].endswith(f"the output of tool call call_1 names /{TOUCHED} under <RUN_DIR>, the call under /workspace")


def test_the_match_check_fails_on_a_wrong_record_of_replacements(round_ledger: Path, tmp_path: Path) -> None:
    files = _exported(round_ledger, tmp_path)

    def miscount(rows):
        rows[0]["metadata"]["chosen_replacements"][0]["count"] = 5

    _rewrite_rows(files.parquet("preference_pairs"), miscount)
    verdict = check_rows_match_ledger(round_ledger, files, "preference_pairs")
    assert not verdict.passed and "records replacements" in verdict.problems[0]
    assert "'working_folder': 5" in verdict.problems[0] and "'working_folder': 6" in verdict.problems[0]


def test_the_match_check_fails_on_a_row_grouped_otherwise(round_ledger: Path, tmp_path: Path) -> None:
    files = _exported(round_ledger, tmp_path)

    def regroup(rows):
        rows[0]["metadata"]["group_by"] = "instance"

    _rewrite_rows(files.parquet("grpo_groups"), regroup)
    verdict = check_rows_match_ledger(round_ledger, files, "grpo_groups")
    assert verdict.problems == ["row 1: is grouped by instance, the report's setting is prompt"]

    def split_prompt(rows):
        rows[0]["metadata"]["group_by"] = "prompt"
        for completion in rows[0]["completions"]:
            completion.insert(0, rows[0]["prompt"].pop()) if rows[0]["prompt"] else completion.insert(0, completion[0])

    _rewrite_rows(files.parquet("grpo_groups"), split_prompt)
    assert "a prompt of its own, though grouped by prompt" in check_rows_match_ledger(round_ledger, files, "grpo_groups").problems[-1]


def test_the_checks_fail_on_a_line_dropped_as_too_long_that_is_not(round_ledger: Path, tmp_path: Path) -> None:
    files = _exported(round_ledger, tmp_path, TrainingFilter(max_tokens=10_000))
    path = files.accounting("sft_rows")
    path.write_text(path.read_text().replace('"fate":"below_min_reward"', '"fate":"too_long"', 1))
    verdict = check_accounting(round_ledger, files, "sft_rows")
    assert not verdict.passed and verdict.problems[0].endswith("is dropped as too_long, which it is not")
    # A row longer than the limit the report records fails the rows' check.
    report = json.loads(files.report_json.read_text())
    report["filter"]["max_tokens"] = 20
    files.report_json.write_text(json.dumps(report))
    assert "above max_tokens 20" in check_rows_match_ledger(round_ledger, files, "sft_rows").problems[0]


# ---------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------


def test_the_command_line_takes_every_setting(round_ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokenizer = _tokenizer_file(tmp_path)
    status = cli(["export", str(round_ledger), str(tmp_path / "out"), "--group-by", "instance", "--max-tokens", "60",
                  "--tokenizer", str(tokenizer), "--no-normalize-identifiers"])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "training-report.json").read_text())
    assert {key: report["filter"][key] for key in ("group_by", "max_tokens", "normalize_identifiers", "token_counter")} == {
        "group_by": "instance", "max_tokens": 60, "normalize_identifiers": False, "token_counter": "tokenizer",
    }  # fmt: skip
    assert cli(["export", str(round_ledger), str(tmp_path / "bad"), "--max-tokens", "0"]) == 1
    assert "max_tokens must be at least 1" in capsys.readouterr().err
