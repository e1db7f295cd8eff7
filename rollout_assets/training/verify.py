"""The training checks' recount: the written files read back and compared with the ledger, by
a path of their own (no code of the export is reused: not its scan, filter or row builders).

Each `check_*` returns a `TrainingVerdict`. The ledger is reduced to one small record per line
(where it lies, reward, flags), kept in a scratch SQLite file (verify_facts.py) and looked up
by rollout id; the accounting is compared with it there (verify_accounting.py). The lines in
rows are read again, one at a time, and compared message by message with what the row holds;
the Parquet files are read in batches, so memory stays flat however large the round. A row's transcripts are checked against the ledger, for
their identifiers and for their tool messages in one reading of the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson

from rollout_assets.ledger.snapshot import LedgerSnapshot
from rollout_assets.stages.memory import return_freed_memory
from rollout_assets.training.files import TrainingFiles, parquet_rows
from rollout_assets.training.recount_identifiers import RowRecount, compared, row_replacements
from rollout_assets.training.verify_accounting import check_accounting, row_ids
from rollout_assets.training.verify_facts import (
    Ledger,
    LedgerFacts,
    LedgerFactsTable,
    TrainingVerdict,
    facts_of,
    ledger_facts,
    opened,
    report_settings,
)

_LINES_A_CHUNK = 64

__all__ = [
    "CHECKS",
    "LedgerFacts",
    "TrainingVerdict",
    "check_accounting",
    "check_identifiers_normalized",
    "check_pair_margins",
    "check_rows_match_ledger",
    "check_tool_messages",
    "ledger_facts",
    "verify_training",
]


def _chunks(rows: Iterator[tuple[int, dict[str, Any]]], dataset: str) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """The numbered rows a few at a time, about `_LINES_A_CHUNK` of their lines in each: the
    rows of a chunk have their lines found together (a GRPO row holds a whole group)."""
    chunk: list[tuple[int, dict[str, Any]]] = []
    lines = 0
    for numbered in rows:
        chunk.append(numbered)
        lines += len(row_ids(dataset, numbered[1]))
        if lines >= _LINES_A_CHUNK:
            yield chunk
            chunk, lines = [], 0
    if chunk:
        yield chunk


def _transcripts(dataset: str, row: dict[str, Any]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(rollout_id, the full transcript the row holds for it) for each line in the row."""
    if dataset == "sft_rows":
        yield row["metadata"]["rollout_id"], row["messages"]
    elif dataset == "preference_pairs":
        yield row["metadata"]["chosen_rollout_id"], row["prompt"] + row["chosen"]
        yield row["metadata"]["rejected_rollout_id"], row["prompt"] + row["rejected"]
    else:
        for rollout_id, completion in zip(row["rollout_ids"], row["completions"], strict=True):
            yield rollout_id, row["prompt"] + completion


def check_rows_match_ledger(
    ledger: Ledger,
    files: TrainingFiles,
    dataset: str,
    facts: LedgerFactsTable | None = None,
    settings: dict[str, Any] | None = None,
) -> TrainingVerdict:
    """Every row's lines are ledger lines, trainable (not gated, reward not null, no gap), the
    row holds exactly their transcripts with the identifiers replaced as the checks recount
    them (recount_identifiers.py), records those replacements and stays within the token
    limit; a pair or a group joins lines of its role and instance, grouped as the report says."""
    return _recount_rows(ledger, files, dataset, facts, settings)[0]


def check_identifiers_normalized(
    ledger: Ledger,
    files: TrainingFiles,
    dataset: str,
    facts: LedgerFactsTable | None = None,
    settings: dict[str, Any] | None = None,
) -> TrainingVerdict:
    """With identifiers normalized, no row names its line's working folder, worker name, run
    folder or session ids any more, and no tool output names a path under another placeholder
    than its call does."""
    return _recount_rows(ledger, files, dataset, facts, settings)[1]


def _recount_rows(
    ledger: Ledger,
    files: TrainingFiles,
    dataset: str,
    facts: LedgerFactsTable | None,
    settings: dict[str, Any] | None,
) -> tuple[TrainingVerdict, TrainingVerdict, TrainingVerdict]:
    """The verdicts of match_ledger, identifiers_normalized and tool_messages_answer_calls,
    from one reading of the rows and of each of their ledger lines."""
    verdicts = TrainingVerdict(True), TrainingVerdict(True), TrainingVerdict(True, {"tool_messages": 0})
    rows = checked = 0
    with facts_of(ledger, facts) as facts:
        recount = RowRecount(settings if settings is not None else report_settings(files))
        with opened(ledger) as snapshot:
            for chunk in _chunks(enumerate(parquet_rows(files.parquet(dataset)), start=1), dataset):
                found = facts.get_many(rollout_id for _, row in chunk for rollout_id in row_ids(dataset, row))
                for numbered in chunk:
                    rows += 1
                    checked += _recount_row(snapshot, found.get, recount, dataset, numbered, verdicts)
    matching, normalized, _ = verdicts
    matching.counts, normalized.counts = {"rows": rows}, {"lines_checked": checked}
    return verdicts


def _recount_row(
    snapshot: LedgerSnapshot,
    lookup: Callable[[str], LedgerFacts | None],
    recount: RowRecount,
    dataset: str,
    numbered: tuple[int, dict[str, Any]],
    verdicts: tuple[TrainingVerdict, TrainingVerdict, TrainingVerdict],
) -> int:
    """Row `number` against its ledger lines, each found by its rollout id (`lookup`); the
    number of its lines whose identifiers were checked."""
    (number, row), (matching, normalized, tools) = numbered, verdicts
    lines, checked = [], 0
    for (rollout_id, messages), replaced in zip(_transcripts(dataset, row), row_replacements(dataset, row)):
        _answer_calls(tools, number, rollout_id, messages)
        fact = lookup(rollout_id)
        if fact is None:
            matching.fail(f"row {number}: {rollout_id} is not a line of the ledger")
            continue
        if fact.gated or fact.reward is None or fact.has_gap:
            matching.fail(f"row {number}: ledger line {fact.lineno} is gated, unrewarded or a gap")
            continue
        line = orjson.loads(snapshot.read(fact.offset, fact.length))
        lines.append(line)
        targets = recount.targets(line)
        difference, counts = compared(messages, line["messages"], targets)
        if difference is not None:
            matching.fail(f"row {number}: the messages differ from ledger line {fact.lineno} ({difference})")
        elif (problem := recount.line_problem(line, counts, replaced, messages)) is not None:
            matching.fail(f"row {number}: ledger line {fact.lineno}: {problem}")
        if recount.normalize:
            checked += 1
            if (problem := recount.identifier_problem(messages, targets)) is not None:
                normalized.fail(f"row {number} ({rollout_id}): {problem}")
    if (problem := recount.row_problem(dataset, row, lines)) is not None:
        matching.fail(f"row {number}: {problem}")
    return checked


def check_tool_messages(files: TrainingFiles, dataset: str) -> TrainingVerdict:
    """Every tool message answers a tool call of an earlier assistant message of its row."""
    verdict = TrainingVerdict(True, {"tool_messages": 0})
    for number, row in enumerate(parquet_rows(files.parquet(dataset)), start=1):
        for rollout_id, messages in _transcripts(dataset, row):
            _answer_calls(verdict, number, rollout_id, messages)
    return verdict


def _answer_calls(verdict: TrainingVerdict, number: int, rollout_id: str, messages: list[dict[str, Any]]) -> None:
    """The tool messages of one line of row `number`, each checked against the calls before it."""
    called: set[str] = set()
    for message in messages:
        if message["role"] == "assistant":
            called.update(call["id"] for call in message.get("tool_calls") or () if call.get("id"))
        elif message["role"] == "tool":
            verdict.counts["tool_messages"] += 1
            if message.get("tool_call_id") not in called:
                verdict.fail(
                    f"row {number} ({rollout_id}): tool message {message.get('tool_call_id')!r} "
                    "answers no earlier tool call"
                )


def check_pair_margins(
    ledger: Ledger, files: TrainingFiles, margin: float, facts: LedgerFactsTable | None = None
) -> TrainingVerdict:
    """Every pair's chosen reward (as the ledger has it) exceeds its rejected one by at least
    the margin, and the row's margin is that difference."""
    verdict = TrainingVerdict(True)
    pairs = 0
    with facts_of(ledger, facts) as facts:
        for chunk in _chunks(enumerate(parquet_rows(files.parquet("preference_pairs"), ["margin", "metadata"]), 1), "preference_pairs"):
            found = facts.get_many(rollout_id for _, row in chunk for rollout_id in row_ids("preference_pairs", row))
            for number, row in chunk:
                pairs += 1
                chosen = found.get(row["metadata"]["chosen_rollout_id"])
                rejected = found.get(row["metadata"]["rejected_rollout_id"])
                if chosen is None or rejected is None or chosen.reward is None or rejected.reward is None:
                    verdict.fail(f"pair {number}: a side is not a rewarded ledger line")
                    continue
                difference = chosen.reward - rejected.reward
                if difference < margin:
                    verdict.fail(f"pair {number}: chosen {chosen.reward} - rejected {rejected.reward} is below {margin}")
                elif abs(row["margin"] - difference) > 1e-12:
                    verdict.fail(f"pair {number}: margin {row['margin']} is not the rewards' difference {difference}")
    verdict.counts = {"pairs": pairs}
    return verdict


# The checks of one round's training data, by name: what each proves is in docs/checks.md.
CHECKS = {
    "sft_rows": (
        "sft_rows_account_for_every_line",
        "sft_rows_match_ledger",
        "sft_rows_tool_messages_answer_calls",
        "sft_rows_identifiers_normalized",
    ),
    "preference_pairs": (
        "preference_pairs_account_for_every_line",
        "preference_pairs_match_ledger",
        "preference_pairs_tool_messages_answer_calls",
        "preference_pairs_meet_margin",
        "preference_pairs_identifiers_normalized",
    ),
    "grpo_groups": (
        "grpo_groups_account_for_every_line",
        "grpo_groups_match_ledger",
        "grpo_groups_tool_messages_answer_calls",
        "grpo_groups_identifiers_normalized",
    ),
}


def verify_training(
    ledger: Ledger, files: TrainingFiles, margin: float, settings: dict[str, Any] | None = None
) -> dict[str, TrainingVerdict]:
    """Every check of a round's training data, the ledger read once for all of them; `settings`
    are those the rows were built with (the report's `filter`, read from it when not given)."""
    verdicts = {}
    with ledger_facts(ledger) as facts:
        settings = settings if settings is not None else report_settings(files)
        for dataset, names in CHECKS.items():
            verdicts[names[0]] = check_accounting(ledger, files, dataset, facts, settings)
            return_freed_memory()
            verdicts[names[1]], verdicts[names[-1]], verdicts[names[2]] = _recount_rows(ledger, files, dataset, facts, settings)
            # A Parquet file's footer, parsed whole (a large file's is tens of MiB), and its
            # batches: freed, and given back before the next file is read.
            return_freed_memory()
        verdicts["preference_pairs_meet_margin"] = check_pair_margins(ledger, files, margin, facts)
    return verdicts
