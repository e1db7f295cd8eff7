"""Independent recounts that prove a ledger dropped nothing (the asset checks' logic).

Each audit recounts what the round SHOULD produce straight from the inputs, by its own small
code path (its own directory walk, its own SQL, its own JSON reading), and compares it with
what the ledger holds. None of it calls the readers or the join it verifies: a check that
reuses the code it checks cannot fail, and is worth nothing. No Dagster here either.

The inputs are recounted once (`recount_inputs`) and the ledger is read once
(`recount_ledger`: every line parsed and validated against the schema, every audit's tally
taken in the same pass); each check's verdict is then a comparison of the two.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import multiprocessing
import os
import re
import sqlite3
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import orjson
from pydantic import ValidationError

from rollout_assets.ledger.schema import RolloutLine
from rollout_assets.sources.jsonfiles import MAX_NESTING  # the rule, not the reader

SAMPLE_SIZE = 10

# ASCII digits and a true end of name (`$` would also match before a trailing newline), as the
# loop writes them: a folder the join does not read as a campaign must not be expected here either.
_GEN = re.compile(r"^gen-(\d+)\Z", re.ASCII)
_CAND = re.compile(r"^candidate-(\d+)\Z", re.ASCII)
_RECEIPT = re.compile(r"^gen(\d+)-cand(\d+)-shot(\d+)\.json\Z", re.ASCII)
_OFFICIAL_JUDGE = "swe-arena-official-judge"
# rollout-v1.md, Ids: uuid5 of the invocation's name in this namespace.
_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "tangle.rollout.v1")


_ID_PREFIX = _ID_NAMESPACE.bytes


def _rollout_id(name: str) -> str:
    """uuid5's algorithm, written out (the checks name every line twice; building a uuid.UUID
    for each cost a third of that); a lone surrogate is encoded as UTF-8 would encode it."""
    digest = bytearray(hashlib.sha1(_ID_PREFIX + name.encode("utf-8", "surrogatepass")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass
class AuditResult:
    """One audit's verdict: counts as numbers, plus a sample of what is wrong."""

    passed: bool
    expected: int
    seen: int
    missing: int
    sample: list[str] = field(default_factory=list)
    details: dict[str, int | bool | str] = field(default_factory=dict)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _int_or_double_or_none(text: str) -> int | float | None:
    value = int(text)
    if -(2**63) <= value < 2**64:
        return value
    return _finite_or_none(text)


def _loads(raw: bytes) -> Any:
    """Strict JSON (NaN/Infinity refused); orjson for speed, the standard module for what only
    it accepts (invalid UTF-8, decoded with replacement as the seed does; lone surrogates). A
    number beyond a double reads as null, and an integer beyond 64 bits as a double, as orjson
    and JavaScript read them."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(
            raw.decode("utf-8", errors="replace"),
            parse_constant=_reject_constant,
            parse_float=_finite_or_none,
            parse_int=_int_or_double_or_none,
        )


def _input_json(raw: bytes) -> Any:
    """Input files are read as the seed reads them: UTF-8 with replacement, NaN/Infinity refused;
    and, as the readers do, a document nested deeper than MAX_NESTING levels is unreadable."""
    try:
        value = _loads(raw)
    except RecursionError as error:
        raise ValueError("nested too deeply") from error
    depths = [(value, 1)] if isinstance(value, (dict, list)) else []
    while depths:
        item, depth = depths.pop()
        if depth > MAX_NESTING:
            raise ValueError(f"nested deeper than {MAX_NESTING} levels")
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                depths.append((child, depth + 1))
    return value


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


def _unreadable(error: MalformedLedgerLine) -> AuditResult:
    """A ledger that cannot be read proves nothing: the audit fails and says where."""
    return AuditResult(passed=False, expected=0, seen=0, missing=0, sample=[str(error)], details={"unreadable_lines": 1})


def _sample(items: Iterable[Any]) -> list[str]:
    return [str(item) for item in list(items)[:SAMPLE_SIZE]]


def _compare(expected: Counter[Any], seen: Counter[Any], *, at_least_once: bool = False) -> AuditResult:
    """Multiset comparison: missing, duplicated (unless at_least_once) and unexpected keys."""
    missing = sorted((expected - seen).elements()) if not at_least_once else sorted(set(expected) - set(seen))
    # More often than expected (a session of a cwd two cells list is expected twice).
    duplicated = [] if at_least_once else sorted(key for key, count in seen.items() if 0 < expected[key] < count)
    unexpected = sorted(set(seen) - set(expected))
    return AuditResult(
        passed=not missing and not duplicated and not unexpected,
        expected=sum(expected.values()) if not at_least_once else len(expected),
        seen=sum(seen.values()) if not at_least_once else len(set(seen) & set(expected)),
        missing=len(missing),
        sample=_sample([f"missing {key}" for key in missing] + [f"duplicated {key}" for key in duplicated]
                       + [f"unexpected {key}" for key in unexpected]),
        details={"duplicated": len(duplicated), "unexpected": len(unexpected)},
    )


# ---------------------------------------------------------------------------
# The round's cells, walked independently of sources/round.py
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cell:
    candidate_id: str
    scenario_id: str
    rep: int
    run_dir: str | None
    reward: Any  # what its supervisor line's reward must be
    resolved: bool  # resolved beyond doubt: an artifact that says so, and no error beside it


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell_reward(record: dict[str, Any]) -> int | float | None:
    """rollout-v1.md: the official judge's composite, else 1/0 from a boolean `resolved`, else null."""
    scores = record.get("judgeScores")
    official = scores.get(_OFFICIAL_JUDGE) if isinstance(scores, dict) else None
    composite = official.get("composite") if isinstance(official, dict) else None
    if _is_number(composite):
        return composite
    artifact = record.get("artifact")
    resolved = artifact.get("resolved") if isinstance(artifact, dict) else None
    return (1 if resolved else 0) if isinstance(resolved, bool) else None


def _listdir(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _campaign_dirs(out_dir: Path) -> list[tuple[str, Path]]:
    """(candidate id, folder) of the baseline, then of every candidate by generation and index
    (the ledger's order)."""
    improve = out_dir / "improve-run"
    candidates = []
    for generation in _listdir(improve):
        g = _GEN.match(generation)
        if g is None:
            continue
        for candidate in _listdir(improve / generation):
            c = _CAND.match(candidate)
            if c is not None:
                candidates.append(((int(g[1]), int(c[1])), improve / generation / candidate))
    candidates.sort(key=lambda item: item[0])
    return [("baseline", improve / "baseline")] + [(f"gen{g}-cand{i}", folder) for (g, i), folder in candidates]


def _campaign_cells(candidate_id: str, campaign: Path, names: list[str]) -> Iterator[_Cell]:
    """The cells among `names`, the listing of `campaign` (empty when it is no directory)."""
    for name in names:
        cache = campaign / name / "cached-result.json"
        if not cache.is_file():
            continue
        record = _input_json(cache.read_bytes())
        artifact = record.get("artifact")
        run_dir = artifact.get("runDir") if isinstance(artifact, dict) else None
        rep = record["rep"]
        yield _Cell(
            candidate_id,
            record["scenarioId"],
            int(rep),
            run_dir if isinstance(run_dir, str) else None,
            _cell_reward(record),
            isinstance(artifact, dict) and artifact.get("resolved") is True and record.get("error") is None,
        )


def _result_json(run_dir: str | None) -> dict[str, Any] | None:
    if run_dir is None or not os.path.isabs(run_dir):  # a relative runDir names no file (inputs.md)
        return None
    try:
        result = _input_json(Path(run_dir, "result.json").read_bytes())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


# ---------------------------------------------------------------------------
# What the inputs say the ledger must hold: one recount per round
# ---------------------------------------------------------------------------


class ExpectedLine(NamedTuple):
    """One line the inputs say the ledger must hold, in ledger order."""

    rollout_id: str
    reward: Any  # what its reward must be
    coordinates: tuple[Any, ...]  # what its (candidate_id, generation, candidate_index, instance_id, rep) must be
    # The invocation, for a failing check's sample: (kind, *names), worded only when one is
    # shown (a string per line would hold tens of MB for a large round).
    parts: tuple[Any, ...]

    @property
    def what(self) -> str:
        kind, *names = self.parts
        if kind == "proposer":
            return f"proposer {names[0]}"
        *worker, candidate, scenario, rep = names
        supervisor = f"supervisor {candidate}/{scenario}/rep{rep}"
        return f"worker {worker[0]} session {worker[1]} of {supervisor}" if kind == "worker" else supervisor


@dataclass
class InputsRecount:
    """Everything the round's inputs say the ledger must account for, read once."""

    cells: Counter[tuple[str, str, int]]  # (candidate, scenario, rep): one supervisor line each
    worker_cwds: set[str]  # every worker cwd some result.json lists
    cells_without_worker_list: list[str]  # cells whose workers ran but cannot be listed (see _recount_campaign)
    receipts: Counter[tuple[str, int]]  # (instance_id, shot): one proposer line each
    store_readable: bool
    session_ids: list[str]  # the opencode sessions of those cwds
    run_id: str  # the run_id of every line
    # Every line, in ledger order; None when the recount was taken without the opencode store.
    expected: list[ExpectedLine] | None = None


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")  # as the join reads the store's text


def _opencode_sessions(opencode_db: Path, directories: set[str]) -> tuple[bool, dict[str, list[str]]]:
    """(store readable, the session ids of each of `directories`, oldest first), by this
    module's own SQL. Readable as inputs.md §4 has it: the file opens as a database with a
    `session` table (`id`, `directory`), a `message` and a `part` table, and its first read,
    the whole session table, succeeds."""
    if not opencode_db.is_file() or not directories:
        return opencode_db.is_file(), {}
    try:
        connection = sqlite3.connect(f"file:{quote(str(opencode_db.resolve()))}?mode=ro", uri=True)
    except sqlite3.Error:
        return False, {}
    connection.text_factory = _decode_text
    try:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(session)")}
        if not {"id", "directory"} <= columns:
            return False, {}
        connection.execute("SELECT 1 FROM message LIMIT 1").fetchall()
        connection.execute("SELECT 1 FROM part LIMIT 1").fetchall()
        # One pass over the table: `directory` has no index, so a query per batch of directories
        # would scan it once per batch, a cost growing with the square of the round.
        order = "time_created, id" if "time_created" in columns else "id"
        sessions: dict[str, list[str]] = {}
        for session_id, directory in connection.execute(f"SELECT id, directory FROM session ORDER BY {order}"):
            if isinstance(session_id, str) and directory in directories:
                sessions.setdefault(directory, []).append(session_id)
        return True, sessions
    except sqlite3.Error:
        return False, {}
    finally:
        connection.close()


class _Receipt(NamedTuple):
    key: tuple[str, int]  # (the proposer line's instance_id, shot)
    relative_path: str  # to the outDir: what the proposer's id names
    candidate_id: str  # the campaign whose resolved fraction is the shot's reward


def _receipts(out_dir: Path) -> Iterator[_Receipt]:
    shots = out_dir / "proposer-shots"
    for name in _listdir(shots):
        path = shots / name
        if path.is_dir() and not path.is_symlink():
            for inner in _listdir(path):
                match = _RECEIPT.match(inner)
                if match:
                    candidate = f"gen{int(match[1])}-cand{int(match[2])}"
                    yield _Receipt((f"{candidate}-{name}", int(match[3])), f"proposer-shots/{name}/{inner}", candidate)
        else:
            match = _RECEIPT.match(name)
            if match:
                candidate = f"gen{int(match[1])}-cand{int(match[2])}"
                yield _Receipt((candidate, int(match[3])), f"proposer-shots/{name}", candidate)


@dataclass
class _CellsRecount:
    """What the cells of one or more campaigns say (merged in campaign order)."""

    without_list: list[str] = field(default_factory=list)
    # (cell, its distinct worker cwds in first-listed order), in ledger order
    in_order: list[tuple[_Cell, tuple[str, ...]]] = field(default_factory=list)
    campaigns: list[str] = field(default_factory=list)  # the candidate ids of the campaign folders

    def merge(self, later: _CellsRecount) -> None:
        self.without_list += later.without_list
        self.in_order += later.in_order
        self.campaigns += later.campaigns


def _recount_campaign(candidate_id: str, campaign: Path, names: list[str]) -> _CellsRecount:
    recount = _CellsRecount(campaigns=[candidate_id] if campaign.is_dir() else [])
    for cell in _campaign_cells(candidate_id, campaign, names):
        result = _result_json(cell.run_dir)
        recovered = result.get("recoveredSpend") if result is not None else None
        listed = recovered.get("workerCwds") if isinstance(recovered, dict) else None
        cwds = tuple(dict.fromkeys(cwd for cwd in listed if isinstance(cwd, str))) if isinstance(listed, list) else ()
        recount.in_order.append((cell, cwds))
        # Workers that ran but cannot be listed: no readable result.json, or one that counts
        # spawned workers without naming their cwds.
        reported = result is not None and any(
            _is_number(result.get(key)) and result[key] > 0 for key in ("spawned", "workers")
        )
        if (cell.run_dir is not None and result is None) or (reported and not isinstance(listed, list)):
            recount.without_list.append(f"{cell.candidate_id}/{cell.scenario_id}/rep{cell.rep}")
    # A campaign's cells come in (scenario, rep) order in the ledger, whatever their folder names.
    recount.in_order.sort(key=lambda item: (item[0].scenario_id, item[0].rep))
    return recount


# Below this many cell folders, a second process costs more than it saves.
_PARALLEL_MIN_CELLS = 2_000


def _recount_cells(out_dir: Path, workers: int | None) -> _CellsRecount:
    """The cells of every campaign, one campaign per task; on every core for a large round
    (reading two small JSON files per cell dominates the checks' recount of the inputs)."""
    # Each campaign listed once: the listing both sizes the round and names its cells.
    campaigns = [(candidate_id, campaign, _listdir(campaign)) for candidate_id, campaign in _campaign_dirs(out_dir)]
    workers = min(workers or len(os.sched_getaffinity(0)), len(campaigns))
    total = sum(len(names) for _, _, names in campaigns)
    recount = _CellsRecount()
    if workers <= 1 or total < _PARALLEL_MIN_CELLS:
        for campaign in campaigns:
            recount.merge(_recount_campaign(*campaign))
        return recount
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        for part in pool.map(_recount_campaign, *zip(*campaigns)):
            recount.merge(part)
    return recount


def recount_inputs(out_dir: Path, opencode_db: Path | None, workers: int | None = None) -> InputsRecount:
    """One walk of the cells (and their result.json), the receipts, and one SQL pass over the
    store (skipped when `opencode_db` is None)."""
    cells = _recount_cells(out_dir, workers)
    worker_cwds = {cwd for _, cwds in cells.in_order for cwd in cwds}
    store_readable, sessions = (
        _opencode_sessions(opencode_db, worker_cwds) if opencode_db is not None else (False, {})
    )
    receipts = list(_receipts(out_dir))
    run_id = _run_id(out_dir)
    return InputsRecount(
        cells=Counter((cell.candidate_id, cell.scenario_id, cell.rep) for cell, _ in cells.in_order),
        worker_cwds=worker_cwds,
        cells_without_worker_list=cells.without_list,
        receipts=Counter(receipt.key for receipt in receipts),
        store_readable=store_readable,
        # once per cell listing the session's cwd: two cells listing one cwd both get its lines
        session_ids=[session for _, cwds in cells.in_order for cwd in cwds for session in sessions.get(cwd, [])],
        run_id=run_id,
        expected=None if opencode_db is None else _expected_lines(run_id, cells, sessions, receipts),
    )


def _resolved_fractions(cells: _CellsRecount) -> dict[str, int | float | None]:
    """A candidate's proposer reward (rollout-v1.md): of the baseline's instances, the share
    whose every replicate (max rep + 1 of the campaign) resolved; null without baseline cells."""
    by_campaign: dict[str, list[_Cell]] = {}
    for cell, _ in cells.in_order:
        by_campaign.setdefault(cell.candidate_id, []).append(cell)
    instances = {cell.scenario_id for cell in by_campaign.get("baseline", [])}
    fractions: dict[str, int | float | None] = {}
    for candidate_id in cells.campaigns:
        campaign = by_campaign.get(candidate_id, [])
        reps = max((cell.rep for cell in campaign), default=-1) + 1
        replicates: dict[str, list[bool]] = {}
        for cell in campaign:
            replicates.setdefault(cell.scenario_id, []).append(cell.resolved)
        resolved = sum(
            1 for instance, flags in replicates.items() if instance in instances and len(flags) == reps and all(flags)
        )
        fractions[candidate_id] = resolved / len(instances) if instances else None
    return fractions


def _run_id(out_dir: Path) -> str:
    """rollout-v1.md: loop-provenance.json's `runId`, else the absolute outDir."""
    try:
        provenance = _input_json((out_dir / "improve-run" / "loop-provenance.json").read_bytes())
    except (OSError, ValueError):
        provenance = None
    run_id = provenance.get("runId") if isinstance(provenance, dict) else None
    return run_id if isinstance(run_id, str) and run_id else os.path.abspath(out_dir)


def _expected_lines(
    run_id: str, cells: _CellsRecount, sessions: dict[str, list[str]], receipts: list[_Receipt]
) -> list[ExpectedLine]:
    """Every line of the round, in ledger order, named by its id (rollout-v1.md, Ids): each
    cell's supervisor, then one worker line per session of each of its cwds (one gap line for
    a cwd without a session), cell after cell; then one proposer line per receipt, by path."""
    lines = []
    for cell, cwds in cells.in_order:
        supervisor = _rollout_id(f"{run_id}|supervisor|{cell.candidate_id}|{cell.scenario_id}|{cell.rep}")
        # A worker line carries its supervisor's candidate and task.
        coordinates = (cell.candidate_id, *_generation_and_index(cell.candidate_id), cell.scenario_id, cell.rep)
        names = (cell.candidate_id, cell.scenario_id, cell.rep)
        lines.append(ExpectedLine(supervisor, cell.reward, coordinates, ("supervisor", *names)))
        for cwd in cwds:
            for session in sessions.get(cwd) or ["-"]:
                worker = _rollout_id(f"{supervisor}|{cwd}|{session}")
                lines.append(ExpectedLine(worker, cell.reward, coordinates, ("worker", cwd, session, *names)))
    fractions = _resolved_fractions(cells)
    for receipt in sorted(receipts, key=lambda receipt: receipt.relative_path):
        proposer = _rollout_id(f"{run_id}|proposer|{receipt.relative_path}")
        coordinates = (receipt.candidate_id, *_generation_and_index(receipt.candidate_id), *receipt.key)
        lines.append(
            ExpectedLine(proposer, fractions.get(receipt.candidate_id), coordinates, ("proposer", receipt.relative_path))
        )
    return lines


def _generation_and_index(candidate_id: str) -> tuple[int, int]:
    """rollout-v1.md: the baseline is generation -1, candidate index -1."""
    if candidate_id == "baseline":
        return -1, -1
    generation, index = candidate_id.removeprefix("gen").split("-cand")
    return int(generation), int(index)


# ---------------------------------------------------------------------------
# What the ledger holds: one pass over it
# ---------------------------------------------------------------------------

# The audits that count ledger lines; each fails alone on a line it cannot read.
_COUNTING_AUDITS = ("supervisors", "workers", "proposers", "stats")


@dataclass
class LedgerRecount:
    """One pass over a ledger: what each audit counts, and what is wrong with its lines."""

    path: Path
    lines: int = 0
    # the counting audits' tallies
    supervisors: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    worker_cwds: set[Any] = field(default_factory=set)
    worker_sessions: Counter[str] = field(default_factory=Counter)
    proposers: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    by_role: Counter[Any] = field(default_factory=Counter)
    full_transcripts: int = 0
    gap_lines: int = 0
    reward_labeled: int = 0
    # audit name -> the first line it could not read (that audit then proves nothing)
    unreadable: dict[str, MalformedLedgerLine] = field(default_factory=dict)
    # integrity: every line checked against the schema
    invalid_lines: int = 0
    unlabeled_gaps: int = 0
    line_problems: list[str] = field(default_factory=list)  # the first SAMPLE_SIZE, in line order
    rollout_ids: Counter[str] = field(default_factory=Counter)
    supervisor_ids: set[str] = field(default_factory=set)
    parents: list[tuple[int, str]] = field(default_factory=list)
    # against the inputs: every valid line as (line number, rollout_id, reward, coordinates), in order
    sequence: list[tuple[int, str, Any, tuple[Any, ...]]] = field(default_factory=list)
    # One tuple per distinct coordinates (a supervisor's workers share its): less to keep and to
    # send back from a part's process.
    _coordinates: dict[tuple[Any, ...], tuple[Any, ...]] = field(default_factory=dict, repr=False)
    run_ids: Counter[str] = field(default_factory=Counter)
    ids_not_matching_fields: int = 0
    id_problems: list[str] = field(default_factory=list)  # the first SAMPLE_SIZE, in line order

    def _problem(self, message: str) -> None:
        if len(self.line_problems) < SAMPLE_SIZE:
            self.line_problems.append(message)

    def _check_id(self, value: dict[str, Any], where: str) -> None:
        """A supervisor's or worker's id names its invocation (rollout-v1.md, Ids): an id that
        does not follow from the line's own fields means a field was changed, or the line made up."""
        role = value["role"]
        if role == "supervisor":
            task = value["task"]
            name = f"{value['run_id']}|supervisor|{value['candidate_id']}|{task['instance_id']}|{task['rep']}"
        elif role == "worker":
            ref = value["artifacts"]["transcript_ref"]
            session = ref.removeprefix("opencode:") if isinstance(ref, str) and ref.startswith("opencode:") else "-"
            name = f"{value['parent_rollout_id']}|{value['outcome']['metrics'].get('worker_cwd')}|{session}"
        else:
            return  # a proposer's id names its receipt's path, which the line does not hold
        if _rollout_id(name) != value["rollout_id"]:
            self.ids_not_matching_fields += 1
            if len(self.id_problems) < SAMPLE_SIZE:
                self.id_problems.append(f"{where}: rollout_id {value['rollout_id']} is not the id of {name!r}")

    def _tally(self, audit: str, line: _Line, count: Any) -> None:
        if audit in self.unreadable:
            return
        try:
            count(line)
        except MalformedLedgerLine as error:
            self.unreadable[audit] = error
        except TypeError:  # a field holding a list or object where a key is expected
            self.unreadable[audit] = MalformedLedgerLine(f"{line.where}: a field of the wrong type")

    def _count_supervisor(self, line: _Line) -> None:
        if line.get("role") == "supervisor":
            self.supervisors[(line.get("candidate_id"), line.get("task", "instance_id"), line.get("task", "rep"))] += 1

    def _count_worker(self, line: _Line) -> None:
        if line.get("role") == "worker":
            self.worker_cwds.add(line.get("outcome", "metrics", "worker_cwd"))
            ref = line.get("artifacts", "transcript_ref")
            if isinstance(ref, str) and ref.startswith("opencode:"):
                self.worker_sessions[ref.removeprefix("opencode:")] += 1

    def _count_proposer(self, line: _Line) -> None:
        if line.get("role") == "proposer":
            self.proposers[(line.get("task", "instance_id"), line.get("task", "rep"))] += 1

    def _count_for_stats(self, line: _Line) -> None:
        self.by_role[line.get("role")] += 1
        if line.get("messages"):
            self.full_transcripts += 1
        else:
            self.gap_lines += 1
        self.reward_labeled += line.get("outcome", "reward") is not None

    def _check_integrity(self, value: Any, where: str, lineno: int) -> None:
        try:
            RolloutLine.model_validate(value)
        except ValidationError as error:
            self.invalid_lines += 1
            self._problem(f"{where}: {_why_invalid(error)}")
            return
        if not value["messages"] and not value["provenance"].get("gap"):
            self.unlabeled_gaps += 1
            self._problem(f"{where}: empty transcript without a gap reason")
        self.rollout_ids[value["rollout_id"]] += 1
        if value["role"] == "supervisor":
            self.supervisor_ids.add(value["rollout_id"])
        if value["parent_rollout_id"] is not None:
            self.parents.append((lineno, value["parent_rollout_id"]))
        task = value["task"]
        coordinates = (value["candidate_id"], value["generation"], value["candidate_index"], task["instance_id"], task["rep"])
        coordinates = self._coordinates.setdefault(coordinates, coordinates)
        self.sequence.append((lineno, value["rollout_id"], value["outcome"]["reward"], coordinates))
        self.run_ids[value["run_id"]] += 1
        self._check_id(value, where)

    def observe(self, raw: bytes, lineno: int) -> None:
        where = f"{self.path}:{lineno}"
        self.lines += 1
        try:
            value = _loads(raw)
        except ValueError as error:
            unreadable = MalformedLedgerLine(f"{where}: not JSON ({error})")
            for audit in _COUNTING_AUDITS:
                self.unreadable.setdefault(audit, unreadable)
            self.invalid_lines += 1
            self._problem(f"{where}: {_why_invalid(error)}")
            return
        line = _Line(value, where)
        self._tally("supervisors", line, self._count_supervisor)
        self._tally("workers", line, self._count_worker)
        self._tally("proposers", line, self._count_proposer)
        self._tally("stats", line, self._count_for_stats)
        self._check_integrity(value, where, lineno)


    def merge(self, later: LedgerRecount) -> None:
        """Add the recount of the part of the same ledger that follows this one."""
        self.lines += later.lines
        self.supervisors.update(later.supervisors)
        self.worker_cwds |= later.worker_cwds
        self.worker_sessions.update(later.worker_sessions)
        self.proposers.update(later.proposers)
        self.by_role.update(later.by_role)
        self.full_transcripts += later.full_transcripts
        self.gap_lines += later.gap_lines
        self.reward_labeled += later.reward_labeled
        for audit, error in later.unreadable.items():
            self.unreadable.setdefault(audit, error)
        self.invalid_lines += later.invalid_lines
        self.unlabeled_gaps += later.unlabeled_gaps
        for problem in later.line_problems:
            self._problem(problem)
        self.rollout_ids.update(later.rollout_ids)
        self.supervisor_ids |= later.supervisor_ids
        self.parents += later.parents
        self.sequence += later.sequence
        self.run_ids.update(later.run_ids)
        self.ids_not_matching_fields += later.ids_not_matching_fields
        self.id_problems += later.id_problems[: SAMPLE_SIZE - len(self.id_problems)]


# Below this size a second process costs more than it saves.
_PARALLEL_MIN_BYTES = 32 << 20


def _recount_part(ledger_path: Path, start: int, stop: int, first_lineno: int) -> LedgerRecount:
    recount = LedgerRecount(ledger_path)
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
    with ProcessPoolExecutor(max_workers=len(rest), mp_context=multiprocessing.get_context("fork")) as pool:
        later = [pool.submit(_recount_part, ledger_path, *part) for part in rest]
        recount = _recount_part(ledger_path, *first)
        for future in later:
            recount.merge(future.result())
    return recount


# ---------------------------------------------------------------------------
# The verdicts, one per check
# ---------------------------------------------------------------------------


def supervisors_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """Every campaign cell has exactly one supervisor line."""
    if "supervisors" in ledger.unreadable:
        return _unreadable(ledger.unreadable["supervisors"])
    return _compare(inputs.cells, ledger.supervisors)


def workers_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """Every distinct worker cwd of any result.json has a worker line; every session of them appears once per cell listing its cwd."""
    if "workers" in ledger.unreadable:
        return _unreadable(ledger.unreadable["workers"])
    cwd_result = _compare(Counter(inputs.worker_cwds), Counter(ledger.worker_cwds), at_least_once=True)
    session_result = _compare(Counter(inputs.session_ids), ledger.worker_sessions)
    return AuditResult(
        passed=cwd_result.passed and session_result.passed,
        expected=cwd_result.expected + session_result.expected,
        seen=cwd_result.seen + session_result.seen,
        missing=cwd_result.missing + session_result.missing,
        sample=_sample([f"cwd: {s}" for s in cwd_result.sample] + [f"session: {s}" for s in session_result.sample]),
        details={
            "expected_cwds": cwd_result.expected,
            "missing_cwds": cwd_result.missing,
            "expected_sessions": session_result.expected,
            "missing_sessions": session_result.missing,
            "duplicated_sessions": int(session_result.details["duplicated"]),
            "unexpected_sessions": int(session_result.details["unexpected"]),
            "opencode_store_readable": inputs.store_readable,
        },
    )


def proposers_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """Every shot receipt has exactly one proposer line."""
    if "proposers" in ledger.unreadable:
        return _unreadable(ledger.unreadable["proposers"])
    return _compare(inputs.receipts, ledger.proposers)


def _why_invalid(error: ValueError) -> str:
    """What is wrong with a line: the first field error (pydantic's first line only counts them)."""
    if isinstance(error, ValidationError):
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(error).splitlines()[0]


def integrity_verdict(ledger: LedgerRecount) -> AuditResult:
    """Every line validates, every empty transcript carries a gap, ids are unique, parents exist."""
    duplicated = [rollout_id for rollout_id, n in ledger.rollout_ids.items() if n > 1]
    orphans = [(lineno, parent) for lineno, parent in ledger.parents if parent not in ledger.supervisor_ids]
    problems = list(ledger.line_problems)
    problems += [f"duplicated rollout_id {rollout_id}" for rollout_id in duplicated[:SAMPLE_SIZE]]
    problems += [f"{ledger.path}:{lineno}: parent {parent} is no supervisor line" for lineno, parent in orphans[:SAMPLE_SIZE]]
    return AuditResult(
        passed=not (ledger.invalid_lines or ledger.unlabeled_gaps or duplicated or orphans),
        expected=ledger.lines,
        seen=ledger.lines - ledger.invalid_lines,
        missing=ledger.invalid_lines + ledger.unlabeled_gaps,
        sample=_sample(problems),
        details={
            "invalid_lines": ledger.invalid_lines,
            "unlabeled_gaps": ledger.unlabeled_gaps,
            "duplicated_ids": len(duplicated),
            "orphan_parents": len(orphans),
        },
    )


def _same_reward(seen: Any, expected: Any) -> bool:
    if expected is None or seen is None:
        return seen is expected
    return _is_number(seen) and seen == expected


def inputs_match_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """The ledger holds exactly the lines the inputs name, in their order: every line's id is
    the one its invocation must have, and follows from its own fields; every line is of this
    round (`run_id`); every supervisor's reward is its cell's verdict, inherited by its workers,
    and every proposer's its candidate's resolved fraction.

    The counting checks prove nothing is missing or doubled; this one proves that what is there
    belongs where it is: a worker moved under another supervisor, a line of another round, a
    changed reward or instance id, a made-up gap line or a reordered ledger all fail it."""
    if inputs.expected is None:
        raise ValueError("the inputs were recounted without the opencode store: worker lines cannot be named")
    problems: list[str] = []
    foreign = {run_id: n for run_id, n in ledger.run_ids.items() if run_id != inputs.run_id}
    problems += [f"{n} line(s) of run_id {run_id!r}, not this round's {inputs.run_id!r}" for run_id, n in foreign.items()]
    problems += ledger.id_problems
    expected_ids = [line.rollout_id for line in inputs.expected]
    seen_ids = [rollout_id for _, rollout_id, _, _ in ledger.sequence]
    out_of_place = 0
    if seen_ids != expected_ids:
        index = next(
            (i for i, (seen, expected) in enumerate(zip(seen_ids, expected_ids, strict=False)) if seen != expected),
            min(len(seen_ids), len(expected_ids)),
        )
        out_of_place = ledger.sequence[index][0] if index < len(ledger.sequence) else ledger.lines + 1
        wanted = inputs.expected[index].what if index < len(expected_ids) else "the end of the ledger"
        found = seen_ids[index] if index < len(seen_ids) else "the end of the ledger"
        problems.append(f"{ledger.path}:{out_of_place}: expected {wanted}, found {found}")
    expected_by_id = {line.rollout_id: line for line in inputs.expected}
    matched = [
        (lineno, reward, coordinates, expected_by_id[rollout_id])
        for lineno, rollout_id, reward, coordinates in ledger.sequence
        if rollout_id in expected_by_id
    ]
    wrong_rewards = [(lineno, reward, line) for lineno, reward, _, line in matched if not _same_reward(reward, line.reward)]
    problems += [
        f"{ledger.path}:{lineno}: reward {reward!r}, but the inputs give {line.what} the reward {line.reward!r}"
        for lineno, reward, line in wrong_rewards[:SAMPLE_SIZE]
    ]
    # `==` on tuples: 1 == 1.0 would pass a float generation, but the schema refuses one first.
    wrong_coordinates = [
        (lineno, coordinates, line) for lineno, _, coordinates, line in matched if coordinates != line.coordinates
    ]
    problems += [
        f"{ledger.path}:{lineno}: (candidate_id, generation, candidate_index, instance_id, rep) is {coordinates!r},"
        f" but {line.what} is {line.coordinates!r}"
        for lineno, coordinates, line in wrong_coordinates[:SAMPLE_SIZE]
    ]
    foreign_lines = sum(foreign.values())
    return AuditResult(
        passed=not (foreign or ledger.ids_not_matching_fields or out_of_place or wrong_rewards or wrong_coordinates),
        expected=len(expected_ids),
        seen=len(seen_ids),
        missing=foreign_lines
        + ledger.ids_not_matching_fields
        + len(wrong_rewards)
        + len(wrong_coordinates)
        + (1 if out_of_place else 0),
        sample=_sample(problems),
        details={
            "run_id": inputs.run_id,
            "lines_of_another_run": foreign_lines,
            "ids_not_matching_fields": ledger.ids_not_matching_fields,
            "first_line_out_of_place": out_of_place,
            "wrong_rewards": len(wrong_rewards),
            "wrong_coordinates": len(wrong_coordinates),
        },
    )


def stats_verdict(ledger: LedgerRecount, stats_path: Path) -> AuditResult:
    """The stored counters reconcile with the ledger and with each other."""
    stats = json.loads(stats_path.read_bytes())
    if "stats" in ledger.unreadable:
        return _unreadable(ledger.unreadable["stats"])
    problems = []
    recount = {
        "lines": ledger.lines,
        "fullTranscripts": ledger.full_transcripts,
        "gapLines": ledger.gap_lines,
        "rewardLabeled": ledger.reward_labeled,
    }
    for key, value in recount.items():
        if stats.get(key) != value:
            problems.append(f"{key}: stats say {stats.get(key)}, ledger holds {value}")
    if stats.get("byRole") != dict(ledger.by_role):
        problems.append(f"byRole: stats say {stats.get('byRole')}, ledger holds {dict(ledger.by_role)}")
    if sum((stats.get("byRole") or {}).values()) != stats.get("lines"):
        problems.append("stats: Σ byRole != lines")
    if stats.get("fullTranscripts", 0) + stats.get("gapLines", 0) != stats.get("lines"):
        problems.append("stats: fullTranscripts + gapLines != lines")
    return AuditResult(
        passed=not problems,
        expected=ledger.lines,
        seen=stats.get("lines") if isinstance(stats.get("lines"), int) else -1,
        missing=len(problems),
        sample=_sample(problems),
        details={"reward_labeled": ledger.reward_labeled, "gap_lines": ledger.gap_lines, "full_transcripts": ledger.full_transcripts},
    )


# ---------------------------------------------------------------------------
# One audit from the files, for a single question (each reads what it needs)
# ---------------------------------------------------------------------------


def audit_supervisors(out_dir: Path, ledger_path: Path) -> AuditResult:
    return supervisors_verdict(recount_inputs(out_dir, None), recount_ledger(ledger_path))


def audit_workers(out_dir: Path, ledger_path: Path, opencode_db: Path) -> AuditResult:
    return workers_verdict(recount_inputs(out_dir, opencode_db), recount_ledger(ledger_path))


def audit_proposers(out_dir: Path, ledger_path: Path) -> AuditResult:
    return proposers_verdict(recount_inputs(out_dir, None), recount_ledger(ledger_path))


def audit_inputs_match(out_dir: Path, ledger_path: Path, opencode_db: Path) -> AuditResult:
    return inputs_match_verdict(recount_inputs(out_dir, opencode_db), recount_ledger(ledger_path))


def audit_integrity(ledger_path: Path) -> AuditResult:
    return integrity_verdict(recount_ledger(ledger_path))


def audit_stats(ledger_path: Path, stats_path: Path) -> AuditResult:
    return stats_verdict(recount_ledger(ledger_path), stats_path)


def cells_without_worker_list(out_dir: Path) -> list[str]:
    """Cells whose arm ran (runDir known) but whose result.json is missing or unreadable."""
    return recount_inputs(out_dir, None).cells_without_worker_list
