"""Training rows from a ledger: the filter, the three datasets, their accounting and checks.

Ledgers are real files written through the ledger API from valid lines; the checks read the
written Parquet and JSONL back, and each is shown failing on a file broken on purpose.
"""

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_assets.ledger import write_ledger
from rollout_assets.training import TrainingFilter, export_training
from rollout_assets.training.files import TrainingFiles
from rollout_assets.training.verify import (
    check_accounting,
    check_pair_margins,
    check_rows_match_ledger,
    check_tool_messages,
)
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line

PROMPT = {"role": "user", "content": "Fix the failing test in astropy/io."}


def _worker(name: str, instance: str, reward: float | None, answer: str = "", **outcome: Any) -> dict[str, Any]:
    line = sample_worker_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)))
    line["task"]["instance_id"] = instance
    line["outcome"].update(reward=reward, **outcome)
    if reward is None:
        line["outcome"]["reward_source"] = None
    line["messages"][-1]["content"] = answer or f"Done ({name})."
    return line


def _ledger(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "round-007" / "rollout-ledger.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_ledger(path, lines)
    return path


def _fates(files: TrainingFiles, dataset: str) -> dict[str, str]:
    rows = [json.loads(raw) for raw in files.accounting(dataset).read_text().splitlines()]
    return {row["rollout_id"]: row["fate"] for row in rows}


def _id(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


@pytest.fixture
def mixed_ledger(tmp_path: Path) -> Path:
    gated = _worker("gated", "a", 0, realness_gated=True)
    return _ledger(
        tmp_path,
        [
            sample_line(),  # a supervisor: always a gap line
            _worker("a-best", "a", 1.0),
            _worker("a-good", "a", 0.8),
            _worker("a-ok", "a", 0.6),
            _worker("a-capped", "a", 0.5),
            _worker("a-zero", "a", 0.0),
            _worker("a-copy", "a", 0.9, answer="Done (a-best)."),  # same transcript as a-best
            _worker("b-one", "b", 1.0),
            _worker("b-none", "b", None),
            _worker("b-error", "b", 1.0, error="worker crashed"),
            _worker("b-open", "b", 1.0, is_completed=False),
            _worker("b-cut", "b", 1.0, is_truncated=True),
            gated,
        ],
    )


def test_every_line_ends_in_a_row_or_one_reason(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files
    assert _fates(files, "sft_rows") == {
        sample_line()["rollout_id"]: "gap",
        _id("a-best"): "row",
        _id("a-copy"): "duplicate",
        _id("a-good"): "row",
        _id("a-ok"): "row",
        _id("a-capped"): "per_instance_cap",
        _id("a-zero"): "below_min_reward",
        _id("b-one"): "row",
        _id("b-none"): "no_reward",
        _id("b-error"): "error",
        _id("b-open"): "incomplete",
        _id("b-cut"): "truncated",
        _id("gated"): "gated",
    }
    rows = pq.read_table(files.parquet("sft_rows")).to_pylist()
    # Ledger order, not reward order.
    assert [row["metadata"]["rollout_id"] for row in rows] == [_id(n) for n in ("a-best", "a-good", "a-ok", "b-one")]
    report = json.loads(files.report_json.read_text())["datasets"]["sft_rows"]
    assert (report["rows"], report["lines"], report["dropped"]) == (4, 13, 9)


def test_settings_change_the_fates(mixed_ledger: Path, tmp_path: Path) -> None:
    settings = TrainingFilter(min_reward=0.7, per_instance_cap=1, roles=("proposer",))
    files = export_training(mixed_ledger, tmp_path / "t", "round-007", settings).files
    assert set(_fates(files, "sft_rows").values()) == {"gap", "role_excluded"}
    settings = TrainingFilter(min_reward=0.7, per_instance_cap=1)
    fates = _fates(export_training(mixed_ledger, tmp_path / "u", "round-007", settings).files, "sft_rows")
    assert (fates[_id("a-good")], fates[_id("a-ok")]) == ("per_instance_cap", "below_min_reward")


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown role"):
        TrainingFilter(roles=("judge",))
    with pytest.raises(ValueError, match="per_instance_cap"):
        TrainingFilter(per_instance_cap=0)


def test_sft_rows_are_in_the_chat_shape(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files
    first = json.loads(files.sft_jsonl.read_text().splitlines()[0])
    assert first["messages"][1]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"path":"astropy/io/tests/test_x.py"}'}}
    ]
    assert first["messages"][2] == {"role": "tool", "content": "def test_x(): ...", "tool_call_id": "call_1", "name": "read"}
    assert first["metadata"] == {
        "rollout_id": _id("a-best"), "run_id": "round-0007", "round": "round-007", "role": "worker",
        "candidate_id": "gen0-cand1", "instance_id": "a", "rep": 0, "reward": 1.0,
        "reward_source": "swe-arena-official-judge/inherited", "model": "gpt-5",
        "token_counter": "estimate", "replacements": [],  # nothing of the line's own is in this transcript
    }
    assert first["n_messages"] == 4
    # UTF-8 bytes of contents, reasoning, tool names and arguments, / 4 rounded up.
    sizes = len(PROMPT["content"]) + len("Look at the test first.") + len("read") + len(
        '{"path":"astropy/io/tests/test_x.py"}') + len("def test_x(): ...") + len("Done (a-best).")
    assert first["tokens"] == -(-sizes // 4)


def test_the_arrow_schema_is_fixed(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files
    schema = pq.read_schema(files.parquet("sft_rows"))
    message = schema.field("messages").type.value_type
    assert message.field("tool_calls").type.value_type.field("function").type.field("arguments").type == pa.string()
    assert schema.field("metadata").type.field("reward").type == pa.float64()
    # An empty dataset still has its schema.
    empty = pq.read_schema(files.parquet("preference_pairs"))
    assert empty.names == ["prompt", "chosen", "rejected", "margin", "metadata"]


def _pairs_ledger(tmp_path: Path) -> Path:
    lines = [_worker(f"p{i}", "a", reward) for i, reward in enumerate([1.0, 0.0, 0.7, 0.4, 0.68])]
    other_prompt = _worker("other-prompt", "a", 0.2)
    other_prompt["messages"][0]["content"] = "Something else entirely."
    no_assistant = _worker("no-assistant", "a", 0.1)
    no_assistant["messages"] = [PROMPT]
    lonely = _worker("lonely", "b", 1.0)
    return _ledger(tmp_path, [*lines, other_prompt, no_assistant, lonely])


def test_preference_pairs_best_against_worst(tmp_path: Path) -> None:
    files = export_training(_pairs_ledger(tmp_path), tmp_path / "training", "round-007").files
    pairs = pq.read_table(files.parquet("preference_pairs")).to_pylist()
    assert [(p["metadata"]["chosen_rollout_id"], p["metadata"]["rejected_rollout_id"]) for p in pairs] == [
        (_id("p0"), _id("p1")),
        (_id("p2"), _id("p3")),
    ]
    assert pairs[0]["prompt"][0]["content"] == PROMPT["content"] and len(pairs[0]["prompt"]) == 1
    assert pairs[0]["chosen"][-1]["content"] == "Done (p0)." and pairs[0]["rejected"][-1]["content"] == "Done (p1)."
    assert pairs[1]["margin"] == pytest.approx(0.3)
    fates = _fates(files, "preference_pairs")
    assert fates[_id("p4")] == "unpaired"  # the middle line: 0.68 has no partner left
    assert fates[_id("other-prompt")] == "prompt_mismatch"
    assert fates[_id("no-assistant")] == "no_completion"
    assert fates[_id("lonely")] == "unpaired"


def test_grpo_groups_share_a_prompt(tmp_path: Path) -> None:
    files = export_training(_pairs_ledger(tmp_path), tmp_path / "training", "round-007").files
    groups = pq.read_table(files.parquet("grpo_groups")).to_pylist()
    assert len(groups) == 1
    assert groups[0]["rollout_ids"] == [_id(f"p{i}") for i in range(5)]
    assert groups[0]["rewards"] == [1.0, 0.0, 0.7, 0.4, 0.68]
    assert len(groups[0]["completions"]) == 5 and groups[0]["completions"][0][0]["role"] == "assistant"
    assert _fates(files, "grpo_groups")[_id("lonely")] == "group_too_small"


def test_checks_pass_on_an_export(tmp_path: Path) -> None:
    ledger = _pairs_ledger(tmp_path)
    files = export_training(ledger, tmp_path / "training", "round-007").files
    for dataset in ("sft_rows", "preference_pairs", "grpo_groups"):
        for verdict in (
            check_accounting(ledger, files, dataset),
            check_rows_match_ledger(ledger, files, dataset),
            check_tool_messages(files, dataset),
        ):
            assert verdict.passed, verdict.problems
    assert check_pair_margins(ledger, files, 0.05).passed


def _rewrite_rows(path: Path, change) -> None:
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def test_accounting_check_fails_on_a_line_with_no_fate(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files
    path = files.accounting("sft_rows")
    path.write_text("".join(path.read_text().splitlines(keepends=True)[1:]))
    verdict = check_accounting(mixed_ledger, files, "sft_rows")
    assert not verdict.passed and "neither in a row nor dropped" in verdict.problems[0]


def test_accounting_check_fails_on_an_untrue_reason(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files
    path = files.accounting("sft_rows")
    text = path.read_text().replace('"fate":"per_instance_cap"', '"fate":"gated"')
    path.write_text(text)
    verdict = check_accounting(mixed_ledger, files, "sft_rows")
    assert not verdict.passed and "dropped as gated, which it is not" in verdict.problems[0]


def test_accounting_check_fails_on_a_dropped_line_in_a_row(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files
    path = files.accounting("sft_rows")
    path.write_text(path.read_text().replace('"fate":"row"', '"fate":"duplicate"', 1))
    assert not check_accounting(mixed_ledger, files, "sft_rows").passed


def test_rows_check_fails_on_changed_messages(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files

    def edit(rows):
        rows[0]["messages"][0]["content"] = "Fix something else."

    _rewrite_rows(files.parquet("sft_rows"), edit)
    verdict = check_rows_match_ledger(mixed_ledger, files, "sft_rows")
    assert not verdict.passed and "differ from ledger line 2" in verdict.problems[0]


def test_rows_check_fails_on_a_gated_line(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files

    def swap(rows):
        rows[0]["metadata"]["rollout_id"] = _id("gated")

    _rewrite_rows(files.parquet("sft_rows"), swap)
    assert "gated, unrewarded or a gap" in check_rows_match_ledger(mixed_ledger, files, "sft_rows").problems[0]


def test_tool_check_fails_on_an_unanswered_tool_message(mixed_ledger: Path, tmp_path: Path) -> None:
    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files

    def orphan(rows):
        rows[0]["messages"][2]["tool_call_id"] = "call_404"

    _rewrite_rows(files.parquet("sft_rows"), orphan)
    verdict = check_tool_messages(files, "sft_rows")
    assert not verdict.passed and "'call_404' answers no earlier tool call" in verdict.problems[0]


def test_margin_check_fails_on_a_narrow_pair(tmp_path: Path) -> None:
    ledger = _pairs_ledger(tmp_path)
    files = export_training(ledger, tmp_path / "training", "round-007").files
    assert not check_pair_margins(ledger, files, 0.5).passed  # the second pair is 0.3 apart

    def swap(rows):
        meta = rows[0]["metadata"]
        meta["chosen_rollout_id"], meta["rejected_rollout_id"] = meta["rejected_rollout_id"], meta["chosen_rollout_id"]

    _rewrite_rows(files.parquet("preference_pairs"), swap)
    assert not check_pair_margins(ledger, files, 0.05).passed


def test_a_corrupt_ledger_line_is_named(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, [_worker("x", "a", 1.0)])
    with open(ledger, "ab") as handle:
        handle.write(b"{not json\n")
    with pytest.raises(ValueError, match=r"rollout-ledger.jsonl:2: invalid JSON: "):
        export_training(ledger, tmp_path / "training", "round-007")


def test_an_export_twice_gives_the_same_bytes(mixed_ledger: Path, tmp_path: Path) -> None:
    first = export_training(mixed_ledger, tmp_path / "one", "round-007").files
    second = export_training(mixed_ledger, tmp_path / "two", "round-007").files
    for name in ("sft.parquet", "sft.jsonl", "preference-pairs.parquet", "grpo-groups.parquet", "training-report.json"):
        assert (first.folder / name).read_bytes() == (second.folder / name).read_bytes(), name


def test_loadable_with_pandas_and_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    files = export_training(_pairs_ledger(tmp_path), tmp_path / "training", "round-007").files
    import pandas as pd

    frame = pd.read_parquet(files.parquet("sft_rows"))
    assert list(frame.columns) == ["messages", "tools", "tokens", "n_messages", "metadata"]
    sft = datasets.load_dataset("parquet", data_files=str(files.parquet("sft_rows")), split="train")
    assert "messages" in sft.column_names and sft[0]["messages"][0]["role"] == "user"  # TRL's SFT column
    dpo = datasets.load_dataset("parquet", data_files=str(files.parquet("preference_pairs")), split="train")
    assert {"prompt", "chosen", "rejected"} <= set(dpo.column_names)  # TRL's DPO columns
    assert dpo[0]["chosen"][0]["role"] == "assistant"
    grpo = datasets.load_dataset("parquet", data_files=str(files.parquet("grpo_groups")), split="train")
    assert grpo[0]["rewards"] == [1.0, 0.0, 0.7, 0.4, 0.68]


def test_verify_training_runs_every_check_once(tmp_path: Path) -> None:
    from rollout_assets.training.verify import CHECKS, verify_training

    ledger = _pairs_ledger(tmp_path)
    files = export_training(ledger, tmp_path / "training", "round-007").files
    verdicts = verify_training(ledger, files, 0.05)
    assert set(verdicts) == {name for names in CHECKS.values() for name in names}
    assert all(verdict.passed for verdict in verdicts.values())
    files.accounting("grpo_groups").write_text("")
    broken = verify_training(ledger, files, 0.05)
    assert [name for name, verdict in broken.items() if not verdict.passed] == ["grpo_groups_account_for_every_line"]


def test_a_second_pair_below_the_margin_is_not_formed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Four lines of one bucket: 1.0 against 0.0 is a pair; 0.9 against 0.88 is 0.02 apart,
    # below the margin of 0.05, so both stay unpaired.
    ledger = _ledger(tmp_path, [_worker(f"q{i}", "a", reward) for i, reward in enumerate([1.0, 0.9, 0.88, 0.0])])
    files = export_training(ledger, tmp_path / "training", "round-007").files
    pairs = pq.read_table(files.parquet("preference_pairs")).to_pylist()
    assert [(p["metadata"]["chosen_rollout_id"], p["metadata"]["rejected_rollout_id"]) for p in pairs] == [
        (_id("q0"), _id("q3"))
    ]
    fates = _fates(files, "preference_pairs")
    assert fates[_id("q1")] == fates[_id("q2")] == "unpaired"
    assert check_pair_margins(ledger, files, 0.05).passed

    # The margin tested for a bucket's first pair only: the second pair is written, the
    # accounting agrees with it, and the margin check names it.
    import rollout_assets.training.select as select

    def margin_for_the_first_pair_only(keys, settings):
        selection = select.Selection()
        for bucket in select._prompt_buckets(keys, selection, settings.group_by):
            ranked = select._by_best_reward(bucket)
            best, worst = 0, len(ranked) - 1
            while best < worst and (best > 0 or ranked[best].reward - ranked[worst].reward >= settings.margin):
                selection.rows.append((ranked[best].index, ranked[worst].index))
                selection.outcome[ranked[best].index] = selection.outcome[ranked[worst].index] = "row"
                best, worst = best + 1, worst - 1
            for key in ranked:
                selection.outcome.setdefault(key.index, "unpaired")
        return selection

    import rollout_assets.training.export as export_module

    monkeypatch.setitem(export_module._SELECTORS, "preference_pairs", margin_for_the_first_pair_only)
    broken = export_training(ledger, tmp_path / "broken", "round-007").files
    assert len(pq.read_table(broken.parquet("preference_pairs")).to_pylist()) == 2
    assert check_accounting(ledger, broken, "preference_pairs").passed
    verdict = check_pair_margins(ledger, broken, 0.05)
    assert not verdict.passed and verdict.problems[0].startswith("pair 2: chosen 0.9 - rejected 0.88 is below 0.05")



def test_a_drop_reason_that_holds_but_not_first_fails_the_accounting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An errored line that also never completed is `error`, the earlier reason. A filter that
    # lets errors through drops it as `incomplete`: true of the line, and the accounting agrees
    # with the rows, but not the first reason that holds.
    crashed = _worker("crashed", "a", 1.0, error="worker crashed", is_completed=False)
    ledger = _ledger(tmp_path, [_worker("fine", "a", 1.0), crashed])
    files = export_training(ledger, tmp_path / "training", "round-007").files
    assert _fates(files, "sft_rows")[_id("crashed")] == "error"
    assert check_accounting(ledger, files, "sft_rows").passed

    import rollout_assets.training.filter as filter_module
    import rollout_assets.training.scan as scan_module

    real = filter_module.line_drop_reason

    def errors_let_through(line: dict[str, Any], settings: Any) -> str | None:
        return real({**line, "outcome": {**line["outcome"], "error": None}}, settings)

    monkeypatch.setattr(scan_module, "line_drop_reason", errors_let_through)
    broken = export_training(ledger, tmp_path / "broken", "round-007").files
    assert _fates(broken, "sft_rows")[_id("crashed")] == "incomplete"
    verdict = check_accounting(ledger, broken, "sft_rows")
    assert not verdict.passed
    assert verdict.problems == [f"ledger line 2 ({_id('crashed')}) is incomplete, but error holds first"]


def test_a_cap_off_by_one_and_groups_of_one_fail_the_accounting(
    mixed_ledger: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both bugs write rows and an accounting that agree with each other; the dataset rules,
    # recounted from the rows and the ledger, do not hold.
    import dataclasses

    import rollout_assets.training.export as export_module
    import rollout_assets.training.select as select

    files = export_training(mixed_ledger, tmp_path / "training", "round-007").files
    for dataset in ("sft_rows", "grpo_groups"):
        assert check_accounting(mixed_ledger, files, dataset).passed

    def cap_off_by_one(keys, settings):
        return select.select_sft(keys, dataclasses.replace(settings, per_instance_cap=settings.per_instance_cap + 1))

    def groups_of_one(keys, settings):
        selection = select.select_groups(keys, settings)
        for index, fate in list(selection.outcome.items()):
            if fate == "group_too_small":
                selection.rows.append((index,))
                selection.outcome[index] = "row"
        return selection

    monkeypatch.setitem(export_module._SELECTORS, "sft_rows", cap_off_by_one)
    monkeypatch.setitem(export_module._SELECTORS, "grpo_groups", groups_of_one)
    broken = export_training(mixed_ledger, tmp_path / "broken", "round-007").files
    sft = check_accounting(mixed_ledger, broken, "sft_rows")
    assert not sft.passed and "4 SFT rows of worker on a, above the cap of 3" in sft.problems
    groups = check_accounting(mixed_ledger, broken, "grpo_groups")
    assert not groups.passed and any("holds 1 line(s); a group needs two or more" in p for p in groups.problems)
