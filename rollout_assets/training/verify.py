"""The training checks' recount: the written files read back and compared with the ledger, by
a path of their own (no code of the export is reused: not its scan, filter or row builders).

Each `check_*` returns a `TrainingVerdict`. The ledger is reduced to one small record per line
(where it lies, reward, flags); the lines in rows are read again, one at a time, and compared
message by message with what the row holds; the Parquet files are read in batches, so memory
stays flat however large the round. A row's transcripts are checked against the ledger, for
their identifiers and for their tool messages in one reading of the rows.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rollout_assets.ledger.snapshot import LedgerSnapshot
from rollout_assets.training.files import TrainingFiles, parquet_rows
from rollout_assets.training.recount_identifiers import RowRecount, compared, row_replacements

# A ledger as the checks take it: a path they open, or a snapshot the caller already read from
# (`rollout-assets export` checks the very bytes its rows were built from).
Ledger = Path | LedgerSnapshot

SAMPLE = 5
# The reasons of a line alone, in the order the filter tests them (docs/training.md): a line is
# dropped for the first that holds, so an errored line is `error`, never `incomplete`.
_LINE_REASON_ORDER = ("gap", "role_excluded", "gated", "error", "incomplete", "truncated", "no_reward")
_PER_LINE_REASONS = set(_LINE_REASON_ORDER)


@dataclass
class TrainingVerdict:
    passed: bool
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        self.passed = False
        if len(self.problems) < SAMPLE:
            self.problems.append(problem)


@dataclass(frozen=True, slots=True)
class LedgerFacts:
    lineno: int
    offset: int
    length: int
    reward: float | None
    gated: bool
    role: str
    has_gap: bool
    error: bool
    completed: bool
    truncated: bool
    instance_id: str = ""


@contextlib.contextmanager
def _opened(ledger: Ledger) -> Iterator[LedgerSnapshot]:
    if isinstance(ledger, LedgerSnapshot):
        yield ledger
    else:
        with LedgerSnapshot(ledger) as snapshot:
            yield snapshot


def ledger_facts(ledger: Ledger) -> dict[str, LedgerFacts]:
    """rollout_id -> what the checks need of that line, read straight from the ledger file."""
    facts = {}
    with _opened(ledger) as snapshot:
        for lineno, (offset, raw) in enumerate(snapshot.lines(), start=1):
            line = orjson.loads(raw)
            outcome = line["outcome"]
            facts[line["rollout_id"]] = LedgerFacts(
                lineno,
                offset,
                len(raw),
                outcome["reward"],
                outcome["realness_gated"] is True,
                line["role"],
                not line["messages"] or line["provenance"].get("gap") is not None,
                outcome["error"] is not None,
                outcome["is_completed"] is True,
                outcome["is_truncated"] is True,
                str((line.get("task") or {}).get("instance_id")),
            )
    return facts



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


# Where a row names its lines: the accounting reads these columns only, not the transcripts.
_ID_COLUMNS = {"sft_rows": ["metadata"], "preference_pairs": ["metadata"], "grpo_groups": ["rollout_ids"]}


def _ids(dataset: str, row: dict[str, Any]) -> list[str]:
    if dataset == "sft_rows":
        return [row["metadata"]["rollout_id"]]
    if dataset == "preference_pairs":
        return [row["metadata"]["chosen_rollout_id"], row["metadata"]["rejected_rollout_id"]]
    return row["rollout_ids"]


def check_accounting(
    ledger: Ledger,
    files: TrainingFiles,
    dataset: str,
    facts: dict[str, LedgerFacts] | None = None,
    settings: dict[str, Any] | None = None,
) -> TrainingVerdict:
    """Every ledger line has exactly one fate (a row, or a drop reason), kept + dropped =
    lines, the lines in rows are exactly those the accounting keeps, and a per-line drop
    reason is true of the line (`too_long` by the checks' own count of its normalized transcript)
    and is the first reason of the line alone that holds."""
    facts = facts if facts is not None else ledger_facts(ledger)
    settings = settings if settings is not None else _report_settings(files)
    recount = RowRecount(settings)
    roles = set(settings.get("roles") or ())
    verdict = TrainingVerdict(True)
    fates: dict[str, str] = {}
    with open(files.accounting(dataset), "rb") as handle:
        for raw in handle:
            entry = orjson.loads(raw)
            if entry["rollout_id"] in fates:
                verdict.fail(f"line {entry['line']} ({entry['rollout_id']}) is accounted for twice")
            fates[entry["rollout_id"]] = entry["fate"]
    in_rows = Counter(rid for row in parquet_rows(files.parquet(dataset), _ID_COLUMNS[dataset]) for rid in _ids(dataset, row))
    for rollout_id, fact in facts.items():
        fate = fates.get(rollout_id)
        if fate is None:
            verdict.fail(f"ledger line {fact.lineno} ({rollout_id}) is neither in a row nor dropped")
        elif fate == "row" and not in_rows[rollout_id]:
            verdict.fail(f"ledger line {fact.lineno} ({rollout_id}) is accounted as a row but no row holds it")
        elif fate != "row" and in_rows[rollout_id]:
            verdict.fail(f"ledger line {fact.lineno} ({rollout_id}) is dropped as {fate} but a row holds it")
        elif fate in _PER_LINE_REASONS and not _reason_holds(fate, fact, roles):
            verdict.fail(f"ledger line {fact.lineno} ({rollout_id}) is dropped as {fate}, which it is not")
        elif (first := _first_line_reason(fact, roles)) is not None and fate != first:
            verdict.fail(f"ledger line {fact.lineno} ({rollout_id}) is {fate}, but {first} holds first")
    too_long = [fact for rollout_id, fact in facts.items() if fates.get(rollout_id) == "too_long"]
    with _opened(ledger) as snapshot:
        for fact in too_long:
            if not recount.too_long(orjson.loads(snapshot.read(fact.offset, fact.length))):
                verdict.fail(f"ledger line {fact.lineno} is dropped as too_long, which it is not")
    for rollout_id in set(fates) - set(facts):
        verdict.fail(f"the accounting names {rollout_id}, which is not a line of {getattr(ledger, 'path', ledger)}")
    _dataset_rules_hold(dataset, files, facts, fates, settings, verdict)
    kept = sum(fate == "row" for fate in fates.values())
    verdict.counts = {"lines": len(facts), "kept": kept, "dropped": len(fates) - kept}
    if kept + verdict.counts["dropped"] != len(facts):
        verdict.fail(f"kept {kept} + dropped {verdict.counts['dropped']} is not the ledger's {len(facts)} lines")
    return verdict


def _dataset_rules_hold(
    dataset: str,
    files: TrainingFiles,
    facts: dict[str, LedgerFacts],
    fates: dict[str, str],
    settings: dict[str, Any],
    verdict: TrainingVerdict,
) -> None:
    """The rules of each dataset, recounted from the rows and the ledger's facts: a GRPO group
    holds two lines or more; SFT rows per (role, instance) are at most the cap, and a line
    dropped by the cap has that many kept lines of its (role, instance) rewarded at least as
    well."""
    if dataset == "grpo_groups":
        for number, row in enumerate(parquet_rows(files.parquet(dataset), ["rollout_ids"]), start=1):
            if len(row["rollout_ids"]) < 2:
                verdict.fail(f"group {number} holds {len(row['rollout_ids'])} line(s); a group needs two or more")
    if dataset != "sft_rows" or settings.get("per_instance_cap") is None:
        return
    cap = settings["per_instance_cap"]
    kept: dict[tuple[str, str], list[float]] = {}
    for rollout_id, fate in fates.items():
        if fate == "row" and rollout_id in facts:
            fact = facts[rollout_id]
            kept.setdefault((fact.role, fact.instance_id), []).append(fact.reward if fact.reward is not None else 0.0)
    for (role, instance), rewards in sorted(kept.items()):
        if len(rewards) > cap:
            verdict.fail(f"{len(rewards)} SFT rows of {role} on {instance}, above the cap of {cap}")
    for rollout_id, fate in fates.items():
        if fate == "per_instance_cap" and rollout_id in facts:
            fact = facts[rollout_id]
            better = [r for r in kept.get((fact.role, fact.instance_id), []) if fact.reward is None or r >= fact.reward]
            if len(better) < cap:
                verdict.fail(
                    f"ledger line {fact.lineno} ({rollout_id}) is dropped by the cap, but only {len(better)} kept "
                    f"rows of {fact.role} on {fact.instance_id} are rewarded as well"
                )


def _first_line_reason(fact: LedgerFacts, roles: set[str]) -> str | None:
    return next((reason for reason in _LINE_REASON_ORDER if _reason_holds(reason, fact, roles)), None)


def _reason_holds(reason: str, fact: LedgerFacts, roles: set[str]) -> bool:
    return {
        "gap": fact.has_gap,
        "role_excluded": fact.role not in roles,
        "gated": fact.gated,
        "error": fact.error,
        "incomplete": not fact.completed,
        "truncated": fact.truncated,
        "no_reward": fact.reward is None,
    }[reason]


def check_rows_match_ledger(
    ledger: Ledger,
    files: TrainingFiles,
    dataset: str,
    facts: dict[str, LedgerFacts] | None = None,
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
    facts: dict[str, LedgerFacts] | None = None,
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
    facts: dict[str, LedgerFacts] | None,
    settings: dict[str, Any] | None,
) -> tuple[TrainingVerdict, TrainingVerdict, TrainingVerdict]:
    """The verdicts of match_ledger, identifiers_normalized and tool_messages_answer_calls,
    from one reading of the rows and of each of their ledger lines."""
    facts = facts if facts is not None else ledger_facts(ledger)
    recount = RowRecount(settings if settings is not None else _report_settings(files))
    matching, normalized, tools = TrainingVerdict(True), TrainingVerdict(True), TrainingVerdict(True, {"tool_messages": 0})
    rows = checked = 0
    with _opened(ledger) as snapshot:
        for number, row in enumerate(parquet_rows(files.parquet(dataset)), start=1):
            rows += 1
            lines = []
            for (rollout_id, messages), replaced in zip(_transcripts(dataset, row), row_replacements(dataset, row)):
                _answer_calls(tools, number, rollout_id, messages)
                fact = facts.get(rollout_id)
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
    matching.counts, normalized.counts = {"rows": rows}, {"lines_checked": checked}
    return matching, normalized, tools


def _report_settings(files: TrainingFiles) -> dict[str, Any]:
    """The settings the rows were built with, as the export's report records them."""
    return orjson.loads(files.report_json.read_bytes())["filter"]


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
    ledger: Ledger, files: TrainingFiles, margin: float, facts: dict[str, LedgerFacts] | None = None
) -> TrainingVerdict:
    """Every pair's chosen reward (as the ledger has it) exceeds its rejected one by at least
    the margin, and the row's margin is that difference."""
    facts = facts if facts is not None else ledger_facts(ledger)
    verdict = TrainingVerdict(True)
    pairs = 0
    for number, row in enumerate(parquet_rows(files.parquet("preference_pairs")), start=1):
        pairs += 1
        chosen = facts.get(row["metadata"]["chosen_rollout_id"])
        rejected = facts.get(row["metadata"]["rejected_rollout_id"])
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
    facts = ledger_facts(ledger)
    settings = settings if settings is not None else _report_settings(files)
    verdicts = {}
    for dataset, names in CHECKS.items():
        verdicts[names[0]] = check_accounting(ledger, files, dataset, facts, settings)
        verdicts[names[1]], verdicts[names[-1]], verdicts[names[2]] = _recount_rows(ledger, files, dataset, facts, settings)
    verdicts["preference_pairs_meet_margin"] = check_pair_margins(ledger, files, margin, facts)
    return verdicts
