"""What the ledger holds, read once (`recount_ledger`): every line parsed strictly and
validated against the schema, every audit's tally taken in the same pass (`LedgerRecount`);
a large ledger is cut into parts at line ends, recounted in forked processes and merged in
order."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from rollout_assets.audit.exact_sums import units
from rollout_assets.audit.result import SAMPLE_SIZE
from rollout_assets.audit.spill import SpilledRows, tally_key
from rollout_assets.audit.strict_json import NotALedgerLine, is_number, ledger_json
from rollout_assets.audit.typed_line import valid_line_fields
from rollout_assets.audit.usage import COST_FIELDS
from rollout_assets.audit.wording import REWARD_SOURCES, gap_kind, rollout_id
from rollout_assets.counters import FIRST, KEEP, merge_counters, sample
from rollout_assets.ledger.schema import PARSED_FROM_JSON, RolloutLine


class MalformedLedgerLine(ValueError):
    """A ledger line the audits cannot read: not JSON, or a field missing or mistyped."""


class _Line:
    """One parsed ledger line whose fields are read by path, failing with `file:line` and the field."""

    def __init__(self, value: Any, where: str):
        self.value, self.where = value, where

    def get(self, *path: str) -> Any:
        value = self.value
        for key in path:
            if not isinstance(value, dict) or key not in value:
                raise MalformedLedgerLine(f"{self.where}: no field {'.'.join(path)}")
            value = value[key]
        return value


def _why_invalid(error: ValueError) -> str:
    """What is wrong with a line: the first field error (pydantic's first line only counts them)."""
    if isinstance(error, ValidationError):
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(error).splitlines()[0]


# The audits that count ledger lines; each fails alone on a line it cannot read.
_COUNTING_AUDITS = ("supervisors", "workers", "proposers", "stats")
# The keys they count: (candidate_id, instance_id, rep) of each supervisor line, each worker
# line's cwd and opencode session, (instance_id, rep) of each proposer line.
_TALLIES = ("supervisors", "worker_cwds", "worker_sessions", "proposers")
# The recount's fields kept on disk, appended part after part.
_SPILLED = ("keys", "sequence", "claim_subjects", "worker_message_counts")


class SeenLine(NamedTuple):
    """What the verdicts compare of one valid ledger line."""

    lineno: int
    rollout_id: str
    reward: Any
    coordinates: tuple[Any, ...]  # (candidate_id, generation, candidate_index, instance_id, rep)
    parent: str | None
    role: str
    gap: str | None
    has_messages: bool
    cost: tuple[Any, ...] = ()  # its cost fields the usage proofs recount (usage.COST_FIELDS)


@dataclass
class LedgerRecount:
    """One pass over a ledger: what each audit counts, and what is wrong with its lines.

    The recounts of a ledger's parts are added up by `merge_counters`: a field is summed by its
    type unless its metadata says otherwise (the problem samples keep the first SAMPLE_SIZE,
    in line order; `unreadable` keeps each audit's first)."""

    path: Path = field(metadata=KEEP)  # the ledger: every part's is the same
    lines: int = 0
    # The counting audits' keys, as (key,) records labeled with the tally they count for
    # (_TALLIES), on disk: a Counter each is built when a verdict asks (`tally`).
    keys: SpilledRows = field(default_factory=SpilledRows, metadata=KEEP)
    by_role: Counter[Any] = field(default_factory=Counter)
    full_transcripts: int = 0
    gap_lines: int = 0
    reward_labeled: int = 0
    gap_kinds: Counter[str] = field(default_factory=Counter)  # gap lines by the kind of their gap
    worker_full_transcripts: int = 0  # worker lines with messages: sessions joined
    # role -> [lines with a reward (or a cost), their exact sum in units of 2**-1074 (exact_sums.py)]
    rewards_by_role: dict[str, list[Any]] = field(default_factory=dict)
    costs_by_role: dict[str, list[Any]] = field(default_factory=dict)
    # audit name -> the first line it could not read (that audit then proves nothing)
    unreadable: dict[str, MalformedLedgerLine] = field(default_factory=dict, metadata=FIRST)
    # integrity: every line checked against the schema
    invalid_lines: int = 0
    unlabeled_gaps: int = 0
    line_problems: list[str] = field(default_factory=list, metadata=sample(SAMPLE_SIZE))  # in line order
    # transcript_ref -> the proposer lines joined to it: one-to-one, so never more than one
    joined_transcripts: Counter[str] = field(default_factory=Counter)
    # Against the inputs: every valid line, in order, as a `SeenLine`, on disk (`SpilledRows`),
    # keyed by its rollout_id, labeled with its role and its parent beside it: the ids'
    # uniqueness and the parents' existence are queries of it.
    sequence: SpilledRows = field(default_factory=lambda: SpilledRows(SeenLine), metadata=KEEP)
    # for the gap proofs, what they read beyond a SeenLine: (lineno, worker_cwd, transcript_ref)
    # of every valid worker line without messages and every valid proposer line, in order
    claim_subjects: SpilledRows = field(default_factory=SpilledRows, metadata=KEEP)
    # for the gap proofs' count of a joined worker line: (lineno, worker_cwd, transcript_ref, its
    # number of messages) of every valid worker line with messages, in order
    worker_message_counts: SpilledRows = field(default_factory=SpilledRows, metadata=KEEP)
    run_ids: Counter[str] = field(default_factory=Counter)
    ids_not_matching_fields: int = 0
    id_problems: list[str] = field(default_factory=list, metadata=sample(SAMPLE_SIZE))  # in line order
    wrong_reward_sources: int = 0
    reward_source_problems: list[str] = field(default_factory=list, metadata=sample(SAMPLE_SIZE))

    def merge(self, later: LedgerRecount) -> None:
        """Add the recount of the part that follows: its tallies, and its lines after these."""
        merge_counters(self, later)
        for name in _SPILLED:
            getattr(self, name).extend(getattr(later, name))

    def tally(self, name: str) -> Counter[Any]:
        """The keys counted for one tally of _TALLIES, each as often as the lines gave it."""
        assert name in _TALLIES
        return self.keys.counted(name)

    @property
    def parents(self) -> list[tuple[int, str]]:
        """(lineno, parent) of every valid line with a parent but the sub-agent lines, in order."""
        return [
            (seen.lineno, seen.parent)
            for seen in self.sequence
            if seen.role != "agent" and seen.parent is not None
        ]

    def duplicated_ids(self) -> list[str]:
        """The rollout ids of more than one valid line, in the order of their first line."""
        return self.sequence.keys_counted_twice()

    def orphans(self) -> list[tuple[int, Any]]:
        """(lineno, parent) of the valid lines whose parent is no supervisor line, but the
        sub-agent lines, in order."""
        return [(row[0], row[4]) for row in self.sequence.orphans(False, "agent", "supervisor")]

    def agent_orphans(self) -> list[tuple[int, Any]]:
        """(lineno, parent) of the sub-agent (`agent`) lines whose parent is no proposer line
        (docs/line-format.md), in order."""
        return [(row[0], row[4]) for row in self.sequence.orphans(True, "agent", "proposer")]

    def _problem(self, message: str) -> None:
        if len(self.line_problems) < SAMPLE_SIZE:
            self.line_problems.append(message)

    def _check_id(self, value: dict[str, Any], where: str) -> None:
        """A supervisor's or worker's id names its invocation (docs/line-format.md, Ids): an id that
        does not follow from the line's own fields means a field was changed, or the line made up."""
        role = value["role"]
        if role == "supervisor":
            task = value["task"]
            name = f"{value['run_id']}|supervisor|{value['candidate_id']}|{task['instance_id']}|{task['rep']}"
        elif role == "worker":
            ref = value["artifacts"]["transcript_ref"]
            session = (
                ref.removeprefix("opencode:") if isinstance(ref, str) and ref.startswith("opencode:") else "-"
            )
            name = f"{value['parent_rollout_id']}|{value['outcome']['metrics'].get('worker_cwd')}|{session}"
        elif role == "agent":
            ref, metrics = value["artifacts"]["transcript_ref"], value["outcome"]["metrics"]
            path = Path(ref) if isinstance(ref, str) else Path()
            beside = path.name if path.parent.name != "subagents" else f"{path.parent.parent.name}/subagents/{path.name}"
            key = metrics.get("agent_key") if isinstance(metrics, dict) else None
            name = f"{value['parent_rollout_id']}|agent|{beside}|{key}"
        else:
            return  # a proposer's id names its receipt's path, which the line does not hold
        if rollout_id(name) != value["rollout_id"]:
            self.ids_not_matching_fields += 1
            if len(self.id_problems) < SAMPLE_SIZE:
                self.id_problems.append(
                    f"{where}: rollout_id {value['rollout_id']} is not the id of {name!r}"
                )

    def _tally(self, audit: str, line: _Line, count: Any) -> None:
        if audit in self.unreadable:
            return
        try:
            count(line)
        except MalformedLedgerLine as error:
            self.unreadable[audit] = error
        except TypeError:  # a field holding a list or object where a key is expected
            self.unreadable[audit] = MalformedLedgerLine(f"{line.where}: a field of the wrong type")

    def _count(self, name: str, key: Any) -> None:
        hash(key)  # a key holding a list or object is no key: TypeError, as a Counter's would be
        self.keys.append((key,), key=tally_key(key), label=name)

    def _count_supervisor(self, line: _Line) -> None:
        if line.get("role") == "supervisor":
            task = (line.get("candidate_id"), line.get("task", "instance_id"), line.get("task", "rep"))
            self._count("supervisors", task)

    def _count_worker(self, line: _Line) -> None:
        if line.get("role") == "worker":
            self._count("worker_cwds", line.get("outcome", "metrics", "worker_cwd"))
            ref = line.get("artifacts", "transcript_ref")
            if isinstance(ref, str) and ref.startswith("opencode:"):
                self._count("worker_sessions", ref.removeprefix("opencode:"))

    def _count_proposer(self, line: _Line) -> None:
        if line.get("role") == "proposer":
            self._count("proposers", (line.get("task", "instance_id"), line.get("task", "rep")))

    def _count_for_stats(self, line: _Line) -> None:
        self.by_role[line.get("role")] += 1
        if line.get("messages"):
            self.full_transcripts += 1
            self.worker_full_transcripts += line.get("role") == "worker"
        else:
            self.gap_lines += 1
        reward = line.get("outcome", "reward")
        self.reward_labeled += reward is not None
        role = line.get("role")
        for value, sums in ((reward, self.rewards_by_role), (line.get("cost", "usd"), self.costs_by_role)):
            if is_number(value):
                count_and_sum = sums.setdefault(role, [0, 0])
                count_and_sum[0] += 1
                count_and_sum[1] += units(value)
        provenance = line.get("provenance")
        gap = provenance.get("gap") if isinstance(provenance, dict) else None
        if isinstance(gap, str):
            self.gap_kinds[gap_kind(gap)] += 1

    def _check_reward_source(self, role: str, outcome: dict[str, Any], where: str) -> None:
        """docs/line-format.md: a line's reward_source names where its reward comes from, by role, and
        is null exactly when the reward is."""
        sources = {**REWARD_SOURCES, "agent": f"{REWARD_SOURCES['proposer']}/inherited"}
        if role not in sources:
            return  # no line of a round has another role: the order check names the line
        reward, source = outcome["reward"], outcome["reward_source"]
        expected = None if reward is None else sources[role]
        if source != expected:
            self.wrong_reward_sources += 1
            if len(self.reward_source_problems) < SAMPLE_SIZE:
                self.reward_source_problems.append(
                    f"{where}: reward_source {source!r} beside reward {reward!r}; a {role} line's is {expected!r}"
                )

    def _check_integrity(self, value: Any, where: str, lineno: int) -> None:
        try:
            # Read strictly by ledger_json: its free-form values are JSON (no NaN, string keys).
            RolloutLine.model_validate(value, context=PARSED_FROM_JSON)
        except ValidationError as error:
            self.invalid_lines += 1
            self._problem(f"{where}: {_why_invalid(error)}")
            return
        if not value["messages"] and not value["provenance"].get("gap"):
            self.unlabeled_gaps += 1
            self._problem(f"{where}: empty transcript without a gap reason")
        self._note_valid(value, where, lineno)

    def _note_valid(self, value: Any, where: str, lineno: int) -> None:
        """What the verdicts compare of a valid line."""
        role = value["role"]
        parent = value["parent_rollout_id"]
        self._note_joined(value, role)
        task = value["task"]
        coordinates = (
            value["candidate_id"],
            value["generation"],
            value["candidate_index"],
            task["instance_id"],
            task["rep"],
        )
        outcome = value["outcome"]
        gap = value["provenance"].get("gap")
        messages = bool(value["messages"])
        cost = tuple(value["cost"][name] for name in COST_FIELDS)
        seen = (
            lineno, value["rollout_id"], outcome["reward"], coordinates, parent, role, gap, messages, cost
        )
        self.sequence.append(seen, key=value["rollout_id"], label=role, parent=parent)
        self._note_claims(value, role, lineno)
        self.run_ids[value["run_id"]] += 1
        self._check_id(value, where)
        self._check_reward_source(role, outcome, where)

    def _note_joined(self, value: Any, role: str) -> None:
        """For a proposer, the transcript it joined."""
        if role == "proposer":
            ref = value["artifacts"]["transcript_ref"]
            # A joined shot names its transcript file (a gap shot its receipt): one file, one shot.
            if isinstance(ref, str) and ref.endswith(".jsonl"):
                self.joined_transcripts[ref] += 1

    def _note_claims(self, value: Any, role: str, lineno: int) -> None:
        """What the gap proofs check of the line: a gap's subject, or a joined worker's message count."""
        metrics = value["outcome"]["metrics"]
        cwd = metrics.get("worker_cwd") if role == "worker" and isinstance(metrics, dict) else None
        if (role == "worker" and not value["messages"]) or role == "proposer":
            self.claim_subjects.append((lineno, cwd, value["artifacts"]["transcript_ref"]))
        elif role == "worker":
            self.worker_message_counts.append(
                (lineno, cwd, value["artifacts"]["transcript_ref"], len(value["messages"]))
            )

    def observe(self, raw: bytes, lineno: int) -> None:
        where = f"{self.path}:{lineno}"
        self.lines += 1
        fields = valid_line_fields(raw)
        if fields is not None:  # valid: decoded and proved in one pass
            self._tally_all(_Line(fields, where))
            self._note_valid(fields, where, lineno)
            return
        try:
            value = ledger_json(raw)
        except ValueError as error:
            why = str(error) if isinstance(error, NotALedgerLine) else f"not JSON ({error})"
            unreadable = MalformedLedgerLine(f"{where}: {why}")
            for audit in _COUNTING_AUDITS:
                self.unreadable.setdefault(audit, unreadable)
            self.invalid_lines += 1
            self._problem(f"{where}: {_why_invalid(error)}")
            return
        self._tally_all(_Line(value, where))
        self._check_integrity(value, where, lineno)

    def _tally_all(self, line: _Line) -> None:
        self._tally("supervisors", line, self._count_supervisor)
        self._tally("workers", line, self._count_worker)
        self._tally("proposers", line, self._count_proposer)
        self._tally("stats", line, self._count_for_stats)


# Below this size a second process costs more than it saves.
_PARALLEL_MIN_BYTES = 32 << 20


def _recount_part(
    ledger_path: Path, start: int, stop: int, first_lineno: int, spill_folder: Path | None = None
) -> LedgerRecount:
    """The recount of one part; with `spill_folder`, a part in a process of its own, whose lines
    go to files there that the recount of the whole appends to its own (and its caller removes)."""
    if spill_folder is None:
        recount = LedgerRecount(ledger_path)
    else:
        recount = LedgerRecount(
            ledger_path,
            keys=SpilledRows(path=spill_folder / f"{start}-keys.sqlite"),
            sequence=SpilledRows(SeenLine, spill_folder / f"{start}-sequence.sqlite"),
            claim_subjects=SpilledRows(path=spill_folder / f"{start}-claims.sqlite"),
            worker_message_counts=SpilledRows(path=spill_folder / f"{start}-messages.sqlite"),
        )
    with open(ledger_path, "rb") as handle:
        handle.seek(start)
        position, lineno = start, first_lineno
        while position < stop and (raw := handle.readline()):
            recount.observe(raw, lineno)
            position += len(raw)
            lineno += 1
    return recount


def _parts(ledger_path: Path, size: int, count: int) -> list[tuple[int, int, int]]:
    """(start, stop, number of the first line) of `count` parts cut at line ends."""
    cuts = [0]
    with open(ledger_path, "rb") as handle:
        for index in range(1, count):
            handle.seek(max(size * index // count, cuts[-1]))
            handle.readline()  # to the start of the next line
            cuts.append(min(handle.tell(), size))
        cuts.append(size)
        parts, lineno = [], 1
        for start, stop in itertools.pairwise(cuts):
            parts.append((start, stop, lineno))
            handle.seek(start)
            left = stop - start
            while left > 0:
                block = handle.read(min(left, 1 << 20))
                if not block:
                    break
                lineno += block.count(b"\n")
                left -= len(block)
    return parts


def recount_ledger(
    ledger_path: Path, workers: int | None = None, *, parallel_from_bytes: int = _PARALLEL_MIN_BYTES
) -> LedgerRecount:
    """Read the ledger once, parsing and validating every line with the schema.

    Schema validation dominates, so a large ledger is cut into parts at line ends, one per
    core; each part is recounted in its own (forked) process and the parts are merged in order,
    giving the same recount as one pass.
    """
    size = ledger_path.stat().st_size
    workers = workers or len(os.sched_getaffinity(0))
    if workers <= 1 or size < parallel_from_bytes:
        return _recount_part(ledger_path, 0, size, 1)
    first, *rest = _parts(ledger_path, size, workers)
    # A forked child shares its parent's pages until either writes them, and the collector
    # writes to every object it visits: frozen, the parent's objects (a Dagster run's, hundreds
    # of MB) are left alone by it, in the child and here, and stay shared.
    gc.freeze()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="rollout-audit-parts-") as spill_folder,
            ProcessPoolExecutor(max_workers=len(rest), mp_context=multiprocessing.get_context("fork")) as pool,
        ):
            later = [pool.submit(_recount_part, ledger_path, *part, Path(spill_folder)) for part in rest]
            recount = _recount_part(ledger_path, *first)
            for future in later:
                part = future.result()
                recount.merge(part)
                for name in _SPILLED:
                    getattr(part, name).close()
    finally:
        gc.unfreeze()
    return recount
