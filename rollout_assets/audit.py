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

import errno
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import re
import sqlite3
import stat
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import orjson
from pydantic import ValidationError

from rollout_assets.ledger.schema import RolloutLine
from rollout_assets.io import MAX_NESTING  # the rule, not the reader
# The file primitive, not the reader: opens without blocking on a FIFO, refuses what is no file.
from rollout_assets.io import read_regular_file

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

# rollout-v1.md: a line's reward_source, by role, when its reward is not null (null otherwise).
_REWARD_SOURCES = {
    "supervisor": _OFFICIAL_JUDGE,
    "worker": f"{_OFFICIAL_JUDGE}/inherited",
    "proposer": f"{_OFFICIAL_JUDGE}/candidate-resolved-fraction",
}

# The gap wordings (rollout-v1.md, and README's deliberate differences from the seed), written
# out here rather than taken from the writer, so that a changed wording fails the checks.
_SUPERVISOR_GAP = "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"
_SUPERVISOR_GAP_LIST_MISSING = (
    _SUPERVISOR_GAP + "; result.json missing: this cell's worker sessions cannot be listed"
)
_SUPERVISOR_GAP_UNLISTED = (
    _SUPERVISOR_GAP
    + "; result.json reports spawned workers but lists no worker cwds: this cell's worker sessions cannot be listed"
)


def _store_unavailable_gap(cwd: str) -> str:
    return f"opencode store unavailable; worker cwd {cwd} unrecoverable"


def _no_session_gap(cwd: str) -> str:
    return f"no opencode session found for worker cwd {cwd}"


def _empty_session_gap(session_id: str) -> str:
    return f"opencode session {session_id} has no readable message parts"


def _no_transcript_gap(worktree: str) -> str:
    return f"no claude transcript matched worktree {worktree} in the shot's time window"


def _unreadable_transcripts_gap(worktree: str, path: str, why: str) -> str:
    return f"claude transcripts of worktree {worktree} cannot be read ({path}: {why})"


_UNREADABLE_TRANSCRIPTS_GAP = re.compile(
    r"claude transcripts of worktree (.*) cannot be read \((.*): ([^:]*)\)\Z", re.DOTALL
)
_EMPTY_TRANSCRIPT_GAP = re.compile(
    r"claude transcript (.*) matched the shot's time window but holds no conversation messages\Z", re.DOTALL
)

# Gap kinds as the stats' `byGapReason` names them, each recognised by its whole wording.
_GAP_KINDS = (
    (
        "opencode_store_unavailable",
        re.compile(r"opencode store unavailable; worker cwd .* unrecoverable\Z", re.DOTALL),
    ),
    ("no_opencode_session", re.compile(r"no opencode session found for worker cwd ")),
    ("opencode_session_empty", re.compile(r"opencode session .* has no readable message parts\Z", re.DOTALL)),
    (
        "no_claude_transcript",
        re.compile(r"no claude transcript matched worktree .* in the shot's time window\Z", re.DOTALL),
    ),
    ("claude_transcript_empty", _EMPTY_TRANSCRIPT_GAP),
    ("claude_transcripts_unreadable", _UNREADABLE_TRANSCRIPTS_GAP),
)
_SUPERVISOR_GAP_KINDS = {
    _SUPERVISOR_GAP: "supervisor_transcript_not_persisted",
    _SUPERVISOR_GAP_LIST_MISSING: "supervisor_worker_list_missing",
    _SUPERVISOR_GAP_UNLISTED: "supervisor_worker_list_missing",
}


def _gap_kind(gap: str) -> str:
    """The kind of a gap, by its wording; `other` for a wording no line of a round carries."""
    kind = _SUPERVISOR_GAP_KINDS.get(gap)
    if kind is not None:
        return kind
    for kind, wording in _GAP_KINDS:
        if wording.match(gap):
            return kind
    return "other"


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


class _NotALedgerLine(ValueError):
    """Bytes that are no `tangle.rollout.v1` line whatever their JSON: not UTF-8, not ended by
    a single `\\n`, or holding a number no double can hold."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotALedgerLine(f"the number {text[:40]} overflows a double")
    return value


def _int_or_finite_float(text: str) -> int | float:
    value = int(text)
    return value if -(2**63) <= value < 2**64 else _finite_float(text)


def _ledger_json(raw: bytes) -> Any:
    """One ledger line, read strictly (rollout-v1.md: UTF-8, `\\n` after every line): unlike the
    inputs, nothing is repaired. Invalid UTF-8, a line without its `\\n` (a ledger cut short),
    a `\\r\\n` end, NaN/Infinity and a number beyond a double (`1e400`, which JavaScript reads
    as Infinity) are refused. Past the line end, orjson refuses all of these itself; the
    standard module reads only what orjson refuses although the ledger writer writes it: the
    escape of a lone UTF-16 surrogate."""
    if not raw.endswith(b"\n"):
        raise _NotALedgerLine("no \\n at the end of the line: the ledger ends mid-line")
    if raw.endswith(b"\r\n"):
        raise _NotALedgerLine("the line ends with \\r\\n, not \\n")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _NotALedgerLine(f"not UTF-8 ({error})") from None
    return json.loads(
        text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_int_or_finite_float
    )


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
    return AuditResult(
        passed=False, expected=0, seen=0, missing=0, sample=[str(error)], details={"unreadable_lines": 1}
    )


def _sample(items: Iterable[Any]) -> list[str]:
    return [str(item) for item in list(items)[:SAMPLE_SIZE]]


def _compare(expected: Counter[Any], seen: Counter[Any], *, at_least_once: bool = False) -> AuditResult:
    """Multiset comparison: missing, duplicated (unless at_least_once) and unexpected keys."""
    missing = sorted((expected - seen).elements()) if not at_least_once else sorted(set(expected) - set(seen))
    # More often than expected (a session of a cwd two cells list is expected twice).
    duplicated = (
        [] if at_least_once else sorted(key for key, count in seen.items() if 0 < expected[key] < count)
    )
    unexpected = sorted(set(seen) - set(expected))
    return AuditResult(
        passed=not missing and not duplicated and not unexpected,
        expected=sum(expected.values()) if not at_least_once else len(expected),
        seen=sum(seen.values()) if not at_least_once else len(set(seen) & set(expected)),
        missing=len(missing),
        sample=_sample(
            [f"missing {key}" for key in missing]
            + [f"duplicated {key}" for key in duplicated]
            + [f"unexpected {key}" for key in unexpected]
        ),
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
    # The replicate's verdict: the artifact's boolean `resolved` when there is no error beside
    # it; None (inconclusive) otherwise.
    verdict: bool | None


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


class UnreadableRound(RuntimeError):
    """A folder of the round the audit cannot look into: what it holds is unknown, so nothing
    can be proved about it (the round's readers stop on it too)."""


def _absent(error: OSError) -> bool:
    """An error that means "nothing there": no such entry, not a folder, or a symlink loop."""
    return isinstance(error, (FileNotFoundError, NotADirectoryError)) or error.errno == errno.ELOOP


def _listdir(folder: Path) -> list[str]:
    """The sorted names in `folder`; none when there is no such folder. A folder that exists but
    cannot be listed (permission, I/O) is refused: its cells or receipts would go unseen."""
    try:
        return sorted(os.listdir(folder))
    except OSError as error:
        if _absent(error):
            return []
        raise UnreadableRound(f"{folder}: cannot list the folder ({error.strerror or error})") from error


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
    return [("baseline", improve / "baseline")] + [
        (f"gen{g}-cand{i}", folder) for (g, i), folder in candidates
    ]


def _campaign_cells(candidate_id: str, campaign: Path, names: list[str]) -> Iterator[_Cell]:
    """The cells among `names`, the listing of `campaign` (empty when it is no directory)."""
    for name in names:
        cache = campaign / name / "cached-result.json"
        # A folder the process may not search is not known to hold no cell: refused, never skipped.
        try:
            if not stat.S_ISREG(os.stat(cache).st_mode):
                continue
        except OSError as error:
            if _absent(error):
                continue
            raise UnreadableRound(
                f"{campaign / name}: cannot tell whether it holds a cached-result.json ({error.strerror or error})"
            ) from error
        record = _input_json(read_regular_file(cache))
        artifact = record.get("artifact")
        run_dir = artifact.get("runDir") if isinstance(artifact, dict) else None
        rep = record["rep"]
        yield _Cell(
            candidate_id,
            record["scenarioId"],
            int(rep),
            run_dir if isinstance(run_dir, str) else None,
            _cell_reward(record),
            _replicate_verdict(artifact, record.get("error")),
        )


def _replicate_verdict(artifact: Any, error: Any) -> bool | None:
    resolved = artifact.get("resolved") if isinstance(artifact, dict) else None
    return resolved if isinstance(resolved, bool) and error is None else None


def _result_json(run_dir: str | None) -> dict[str, Any] | None:
    if run_dir is None or not os.path.isabs(run_dir):  # a relative runDir names no file (inputs.md)
        return None
    try:
        result = _input_json(read_regular_file(Path(run_dir, "result.json")))
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
    coordinates: tuple[
        Any, ...
    ]  # what its (candidate_id, generation, candidate_index, instance_id, rep) must be
    # The invocation, for a failing check's sample: (kind, *names), worded only when one is
    # shown (a string per line would hold tens of MB for a large round).
    parts: tuple[Any, ...]
    parent: str | None  # what its parent_rollout_id must be
    gap: Any  # what its gap may be: see _gap_problem

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
    cells_without_worker_list: list[
        str
    ]  # cells whose workers ran but cannot be listed (see _recount_campaign)
    receipts: Counter[tuple[str, int]]  # (instance_id, shot): one proposer line each
    store_readable: bool
    session_ids: list[str]  # the opencode sessions of those cwds
    run_id: str  # the run_id of every line
    # Every line, in ledger order; None when the recount was taken without the opencode store.
    expected: list[ExpectedLine] | None = None


def _opencode_sessions(opencode_db: Path, directories: set[str]) -> tuple[bool, dict[str, list[str]]]:
    """(store readable, the session ids of each of `directories`, oldest first), by this
    module's own SQL. Readable as inputs.md §4 has it: the file opens as a database with a
    `session` table (`id`, `directory`), a `message` and a `part` table, and its first read,
    the whole session table, succeeds.

    A session belongs to a cwd when its `directory` equals the cwd as SQLite compares the
    join's bound text: TEXT whose bytes are the cwd's UTF-8 bytes. Stored bytes that are not
    UTF-8 equal no cwd, even one whose replacement characters they would decode to; a cwd with
    a lone surrogate (an escape in result.json) has no UTF-8 form and equals no directory; a
    BLOB directory or id is no TEXT. The ids are decoded as the join decodes them.
    """
    if not opencode_db.is_file() or not directories:
        return opencode_db.is_file(), {}
    try:
        # Bytes: a path holding a byte that is not UTF-8 (surrogate-escaped) reaches SQLite as is.
        uri = f"file:{quote(os.fsencode(opencode_db.resolve()))}?mode=ro"
        connection = sqlite3.connect(uri, uri=True)
    except sqlite3.Error:
        return False, {}
    connection.text_factory = bytes
    try:
        columns = {
            row[1].decode("utf-8", "replace") for row in connection.execute("PRAGMA table_info(session)")
        }
        if not {"id", "directory"} <= columns:
            return False, {}
        connection.execute("SELECT 1 FROM message LIMIT 1").fetchall()
        connection.execute("SELECT 1 FROM part LIMIT 1").fetchall()
        # One pass over the table: `directory` has no index, so a query per batch of directories
        # would scan it once per batch, a cost growing with the square of the round.
        order = "time_created, id" if "time_created" in columns else "id"
        wanted = {}
        for directory in directories:
            try:
                wanted[directory.encode("utf-8")] = directory
            except UnicodeEncodeError:
                continue
        sessions: dict[str, list[str]] = {}
        for session_id, directory in connection.execute(
            f"SELECT id, directory FROM session WHERE typeof(id) = 'text' AND typeof(directory) = 'text' ORDER BY {order}"
        ):
            cwd = wanted.get(directory)
            if cwd is not None:
                sessions.setdefault(cwd, []).append(session_id.decode("utf-8", "replace"))
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
                    yield _Receipt(
                        (f"{candidate}-{name}", int(match[3])), f"proposer-shots/{name}/{inner}", candidate
                    )
        else:
            match = _RECEIPT.match(name)
            if match:
                candidate = f"gen{int(match[1])}-cand{int(match[2])}"
                yield _Receipt((candidate, int(match[3])), f"proposer-shots/{name}", candidate)


@dataclass
class _CellsRecount:
    """What the cells of one or more campaigns say (merged in campaign order)."""

    without_list: list[str] = field(default_factory=list)
    # (cell, its distinct worker cwds in first-listed order, its supervisor's gap), in ledger order
    in_order: list[tuple[_Cell, tuple[str, ...], str]] = field(default_factory=list)
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
        cwds = (
            tuple(dict.fromkeys(cwd for cwd in listed if isinstance(cwd, str)))
            if isinstance(listed, list)
            else ()
        )
        # Workers that ran but cannot be listed: no readable result.json, or one that counts
        # spawned workers without naming a cwd. The supervisor's gap says which.
        reported = result is not None and any(
            _is_number(result.get(key)) and result[key] > 0 for key in ("spawned", "workers")
        )
        if cell.run_dir is not None and result is None:
            gap = _SUPERVISOR_GAP_LIST_MISSING
        elif reported and not cwds:
            gap = _SUPERVISOR_GAP_UNLISTED
        else:
            gap = _SUPERVISOR_GAP
        recount.in_order.append((cell, cwds, gap))
        if gap is not _SUPERVISOR_GAP:
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
    campaigns = [
        (candidate_id, campaign, _listdir(campaign)) for candidate_id, campaign in _campaign_dirs(out_dir)
    ]
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


def recount_inputs(
    out_dir: Path,
    opencode_db: Path | None,
    workers: int | None = None,
    *,
    claude_projects: Path | None = None,
) -> InputsRecount:
    """One walk of the cells (and their result.json), the receipts, and one SQL pass over the
    store (skipped when `opencode_db` is None); with `claude_projects`, the names of the
    transcript files each proposer worktree could be joined to (no file is read)."""
    cells = _recount_cells(out_dir, workers)
    worker_cwds = {cwd for _, cwds, _ in cells.in_order for cwd in cwds}
    store_readable, sessions = (
        _opencode_sessions(opencode_db, worker_cwds) if opencode_db is not None else (False, {})
    )
    receipts = list(_receipts(out_dir))
    run_id = _run_id(out_dir)
    return InputsRecount(
        cells=Counter((cell.candidate_id, cell.scenario_id, cell.rep) for cell, _, _ in cells.in_order),
        worker_cwds=worker_cwds,
        cells_without_worker_list=cells.without_list,
        receipts=Counter(receipt.key for receipt in receipts),
        store_readable=store_readable,
        # once per cell listing the session's cwd: two cells listing one cwd both get its lines
        session_ids=[
            session for _, cwds, _ in cells.in_order for cwd in cwds for session in sessions.get(cwd, [])
        ],
        run_id=run_id,
        expected=None
        if opencode_db is None
        else _expected_lines(
            run_id, cells, (store_readable, sessions), _proposer_worktrees(out_dir, receipts, claude_projects)
        ),
    )


def _resolved_fractions(cells: _CellsRecount) -> dict[str, int | float | None]:
    """A candidate's proposer reward (rollout-v1.md): of the baseline's instances, the share
    whose every replicate (max rep + 1 of the campaign) resolved; null without baseline cells,
    and null when none of those instances has a conclusive replicate in the campaign."""
    by_campaign: dict[str, list[_Cell]] = {}
    for cell, _, _ in cells.in_order:
        by_campaign.setdefault(cell.candidate_id, []).append(cell)
    instances = {cell.scenario_id for cell in by_campaign.get("baseline", [])}
    fractions: dict[str, int | float | None] = {}
    for candidate_id in cells.campaigns:
        campaign = by_campaign.get(candidate_id, [])
        reps = max((cell.rep for cell in campaign), default=-1) + 1
        replicates: dict[str, list[bool | None]] = {}
        for cell in campaign:
            replicates.setdefault(cell.scenario_id, []).append(cell.verdict)
        resolved = sum(
            1
            for instance, verdicts in replicates.items()
            if instance in instances and len(verdicts) == reps and all(verdict is True for verdict in verdicts)
        )
        judged = any(
            instance in instances and any(verdict is not None for verdict in verdicts)
            for instance, verdicts in replicates.items()
        )
        fractions[candidate_id] = resolved / len(instances) if instances and judged else None
    return fractions


def _run_id(out_dir: Path) -> str:
    """rollout-v1.md: loop-provenance.json's `runId`, else the absolute outDir. A provenance
    file that is there but cannot be read or parsed is no round's (the round reader refuses it)."""
    path = out_dir / "improve-run" / "loop-provenance.json"
    try:
        provenance = _input_json(read_regular_file(path))
    except (FileNotFoundError, NotADirectoryError):
        provenance = None
    except (OSError, ValueError) as error:
        raise UnreadableRound(f"{path}: cannot read the loop provenance ({error})") from error
    run_id = provenance.get("runId") if isinstance(provenance, dict) else None
    return run_id if isinstance(run_id, str) and run_id else os.path.abspath(out_dir)


# What a line's gap may be, beside an exact gap (a supervisor's, or a shot's whose transcript folder
# cannot be listed), as `ExpectedLine.gap`:
_STORE_UNAVAILABLE = 1  # a worker cwd, the store unreadable: its "store unavailable" gap
_NO_SESSION = 2  # a worker cwd without a session in a readable store: its "no session" gap
_SESSION = 3  # a session: its transcript, or its "no readable message parts" gap (parts are not read here)
_NO_TRANSCRIPT = 4  # a shot whose worktree has no transcript file: its "no transcript matched" gap
_TRANSCRIPT = 5  # a shot with transcript files (not read here): joined, or either proposer gap


class _ProposerWorktree(NamedTuple):
    receipt: _Receipt
    worktree: str  # the shot's worktree path, as its gap names it (inputs.md §3)
    transcripts: tuple[str, ...] | None  # its candidate transcript files; None when not looked up
    # (folder, why) of the first of its project folders that is there but cannot be listed
    unreadable_folder: tuple[str, str] | None = None


def _claude_folder_name(cwd: str) -> str:
    """inputs.md §5: every character of `cwd` outside [A-Za-z0-9-] becomes `-`; one outside the
    Basic Multilingual Plane becomes two, as JavaScript's UTF-16 string has two units there."""
    return "".join(ch if ch in _FOLDER_NAME_KEPT else ("--" if ord(ch) > 0xFFFF else "-") for ch in cwd)


_FOLDER_NAME_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def _proposer_worktrees(
    out_dir: Path, receipts: list[_Receipt], claude_projects: Path | None
) -> list[_ProposerWorktree]:
    """Each receipt, by path, with its worktree and the `.jsonl` files of that worktree's Claude
    project folders (its path under the absolute outDir, and under the outDir's real path)."""
    absolute = os.path.abspath(out_dir)
    real = os.path.realpath(absolute)
    projects = os.path.abspath(claude_projects) if claude_projects is not None else None
    found = []
    for receipt in sorted(receipts, key=lambda receipt: receipt.relative_path):
        worktree = os.path.join(absolute, "proposer-wt", receipt.key[0])
        transcripts: tuple[str, ...] | None = None
        unreadable_folder = None
        if projects is not None:
            folders = dict.fromkeys(
                os.path.join(projects, _claude_folder_name(os.path.join(base, "proposer-wt", receipt.key[0])))
                for base in (absolute, real)
            )
            names = []
            for folder in folders:
                listed, why = _transcript_folder(folder)
                names += [os.path.join(folder, name) for name in listed if name.endswith(".jsonl")]
                if why is not None and unreadable_folder is None:
                    unreadable_folder = (folder, why)
            transcripts = tuple(names)
        found.append(_ProposerWorktree(receipt, worktree, transcripts, unreadable_folder))
    return found


def _transcript_folder(folder: str) -> tuple[list[str], str | None]:
    """(the folder's names, why it cannot be listed): a folder that is not there (or is a file)
    holds no transcript, nor does one whose name is too long for any folder to have it; one
    that is there but cannot be listed (permission, a symlink loop) leaves its shots
    unjoinable, with a gap saying why."""
    try:
        return sorted(os.listdir(folder)), None
    except (FileNotFoundError, NotADirectoryError):
        return [], None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return [], None
        return [], error.strerror or str(error)


def _expected_lines(
    run_id: str,
    cells: _CellsRecount,
    store: tuple[bool, dict[str, list[str]]],
    worktrees: list[_ProposerWorktree],
) -> list[ExpectedLine]:
    """Every line of the round, in ledger order, named by its id (rollout-v1.md, Ids): each
    cell's supervisor, then one worker line per session of each of its cwds (one gap line for
    a cwd without a session), cell after cell; then one proposer line per receipt, by path.
    Each with its parent and what its gap may be."""
    store_readable, sessions = store
    lines = []
    for cell, cwds, supervisor_gap in cells.in_order:
        supervisor = _rollout_id(f"{run_id}|supervisor|{cell.candidate_id}|{cell.scenario_id}|{cell.rep}")
        # A worker line carries its supervisor's candidate and task.
        coordinates = (
            cell.candidate_id,
            *_generation_and_index(cell.candidate_id),
            cell.scenario_id,
            cell.rep,
        )
        names = (cell.candidate_id, cell.scenario_id, cell.rep)
        lines.append(
            ExpectedLine(supervisor, cell.reward, coordinates, ("supervisor", *names), None, supervisor_gap)
        )
        for cwd in cwds:
            found = sessions.get(cwd)
            gap = _SESSION if found else _NO_SESSION if store_readable else _STORE_UNAVAILABLE
            for session in found or ["-"]:
                worker = _rollout_id(f"{supervisor}|{cwd}|{session}")
                lines.append(
                    ExpectedLine(
                        worker, cell.reward, coordinates, ("worker", cwd, session, *names), supervisor, gap
                    )
                )
    fractions = _resolved_fractions(cells)
    for receipt, worktree, transcripts, unreadable_folder in worktrees:
        proposer = _rollout_id(f"{run_id}|proposer|{receipt.relative_path}")
        coordinates = (receipt.candidate_id, *_generation_and_index(receipt.candidate_id), *receipt.key)
        parts = ("proposer", receipt.relative_path, worktree, transcripts)
        gap: Any = _NO_TRANSCRIPT if transcripts == () else _TRANSCRIPT
        if unreadable_folder is not None:
            gap = _unreadable_transcripts_gap(worktree, *unreadable_folder)
        lines.append(
            ExpectedLine(proposer, fractions.get(receipt.candidate_id), coordinates, parts, None, gap)
        )
    return lines


def _gap_problem(seen: SeenLine, expected: ExpectedLine) -> str | None:
    """What is wrong with a line's transcript or gap, given what the inputs say of it; None
    when nothing is. A line must carry a transcript or say why not, in the gap the inputs
    give it; one the inputs leave open (a session or a shot's transcripts, neither read here)
    may carry its transcript or one of the gaps that can explain its absence."""
    rule, names = expected.gap, expected.parts[1:]
    if isinstance(rule, str):  # a supervisor's: always a gap line
        required = rule
    elif rule == _STORE_UNAVAILABLE:
        required = _store_unavailable_gap(names[0])
    elif rule == _NO_SESSION:
        required = _no_session_gap(names[0])
    elif rule == _NO_TRANSCRIPT:
        required = _no_transcript_gap(names[1])
    else:
        if seen.has_messages:
            return None if seen.gap is None else f"gap {seen.gap!r} beside its transcript"
        if rule == _SESSION:
            allowed = [_empty_session_gap(names[1])]
            if seen.gap in allowed:
                return None
        else:
            allowed = [
                _no_transcript_gap(names[1]),
                "claude transcript <one of its worktree's transcript files> ...",
                "claude transcripts of worktree ... cannot be read (<one of its transcript files>: ...)",
            ]
            empty = _EMPTY_TRANSCRIPT_GAP.match(seen.gap or "")
            # Files are not opened here: any of them may be the one that could not be read.
            unreadable = _UNREADABLE_TRANSCRIPTS_GAP.match(seen.gap or "")
            if (
                seen.gap == allowed[0]
                or (empty is not None and (names[2] is None or empty[1] in names[2]))
                or (
                    unreadable is not None
                    and unreadable[1] == names[1]
                    and (names[2] is None or unreadable[2] in names[2])
                )
            ):
                return None
        return f"gap {seen.gap!r}, but the inputs allow {expected.what} only its transcript or {allowed!r}"
    if seen.has_messages:
        return f"a transcript, but the inputs give {expected.what} none: its gap must be {required!r}"
    return (
        None
        if seen.gap == required
        else f"gap {seen.gap!r}, but the inputs give {expected.what} the gap {required!r}"
    )


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


class SeenLine(NamedTuple):
    """What the order check compares of one valid ledger line."""

    lineno: int
    rollout_id: str
    reward: Any
    coordinates: tuple[Any, ...]  # (candidate_id, generation, candidate_index, instance_id, rep)
    parent: str | None
    role: str
    gap: str | None
    has_messages: bool


def _join_counters(ledger: LedgerRecount) -> dict[str, int]:
    """The stats' join counters, from the ledger's gap kinds and roles: a worker cwd without a
    session (none found, or the store unavailable), a session without readable messages, a
    worker transcript joined; a shot without a transcript (none matched, or unreadable), every
    other shot joined, some to an empty transcript; a cell whose workers cannot be listed."""
    kinds = ledger.gap_kinds
    shots_missed = kinds["no_claude_transcript"] + kinds["claude_transcripts_unreadable"]
    return {
        "workerSessionsJoined": ledger.worker_full_transcripts,
        "workerCwdsMissed": kinds["no_opencode_session"] + kinds["opencode_store_unavailable"],
        "workerSessionsEmpty": kinds["opencode_session_empty"],
        "proposerShotsJoined": ledger.by_role["proposer"] - shots_missed,
        "proposerShotsMissed": shots_missed,
        "proposerTranscriptsEmpty": kinds["claude_transcript_empty"],
        "cellsWithoutWorkerList": kinds["supervisor_worker_list_missing"],
    }


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
    gap_kinds: Counter[str] = field(default_factory=Counter)  # gap lines by the kind of their gap
    worker_full_transcripts: int = 0  # worker lines with messages: sessions joined
    # role -> [lines with a reward (or a cost), their exact sum]
    rewards_by_role: dict[str, list[Any]] = field(default_factory=dict)
    costs_by_role: dict[str, list[Any]] = field(default_factory=dict)
    # audit name -> the first line it could not read (that audit then proves nothing)
    unreadable: dict[str, MalformedLedgerLine] = field(default_factory=dict)
    # integrity: every line checked against the schema
    invalid_lines: int = 0
    unlabeled_gaps: int = 0
    line_problems: list[str] = field(default_factory=list)  # the first SAMPLE_SIZE, in line order
    rollout_ids: Counter[str] = field(default_factory=Counter)
    supervisor_ids: set[str] = field(default_factory=set)
    parents: list[tuple[int, str]] = field(default_factory=list)
    # against the inputs: every valid line, in order, as a `SeenLine`
    sequence: list[SeenLine] = field(default_factory=list)
    # One tuple per distinct coordinates (a supervisor's workers share its), one string per
    # distinct role or gap: less to keep and to send back from a part's process.
    _coordinates: dict[tuple[Any, ...], tuple[Any, ...]] = field(default_factory=dict, repr=False)
    _strings: dict[str, str] = field(default_factory=dict, repr=False)
    run_ids: Counter[str] = field(default_factory=Counter)
    ids_not_matching_fields: int = 0
    id_problems: list[str] = field(default_factory=list)  # the first SAMPLE_SIZE, in line order
    wrong_reward_sources: int = 0
    reward_source_problems: list[str] = field(default_factory=list)  # the first SAMPLE_SIZE, in line order

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
            session = (
                ref.removeprefix("opencode:") if isinstance(ref, str) and ref.startswith("opencode:") else "-"
            )
            name = f"{value['parent_rollout_id']}|{value['outcome']['metrics'].get('worker_cwd')}|{session}"
        else:
            return  # a proposer's id names its receipt's path, which the line does not hold
        if _rollout_id(name) != value["rollout_id"]:
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

    def _count_supervisor(self, line: _Line) -> None:
        if line.get("role") == "supervisor":
            self.supervisors[
                (line.get("candidate_id"), line.get("task", "instance_id"), line.get("task", "rep"))
            ] += 1

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
            self.worker_full_transcripts += line.get("role") == "worker"
        else:
            self.gap_lines += 1
        reward = line.get("outcome", "reward")
        self.reward_labeled += reward is not None
        role = line.get("role")
        for value, sums in ((reward, self.rewards_by_role), (line.get("cost", "usd"), self.costs_by_role)):
            if _is_number(value):
                count_and_sum = sums.setdefault(role, [0, Fraction(0)])
                count_and_sum[0] += 1
                count_and_sum[1] += Fraction(value)
        provenance = line.get("provenance")
        gap = provenance.get("gap") if isinstance(provenance, dict) else None
        if isinstance(gap, str):
            self.gap_kinds[_gap_kind(gap)] += 1

    def _check_reward_source(self, role: str, outcome: dict[str, Any], where: str) -> None:
        """rollout-v1.md: a line's reward_source names where its reward comes from, by role, and
        is null exactly when the reward is."""
        if role not in _REWARD_SOURCES:
            return  # no line of a round has another role: the order check names the line
        reward, source = outcome["reward"], outcome["reward_source"]
        expected = None if reward is None else _REWARD_SOURCES[role]
        if source != expected:
            self.wrong_reward_sources += 1
            if len(self.reward_source_problems) < SAMPLE_SIZE:
                self.reward_source_problems.append(
                    f"{where}: reward_source {source!r} beside reward {reward!r}; a {role} line's is {expected!r}"
                )

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
        role = self._strings.setdefault(value["role"], value["role"])
        if role == "supervisor":
            self.supervisor_ids.add(value["rollout_id"])
        parent = value["parent_rollout_id"]
        if parent is not None:
            self.parents.append((lineno, parent))
        task = value["task"]
        coordinates = (
            value["candidate_id"],
            value["generation"],
            value["candidate_index"],
            task["instance_id"],
            task["rep"],
        )
        coordinates = self._coordinates.setdefault(coordinates, coordinates)
        outcome = value["outcome"]
        gap = value["provenance"].get("gap")
        if gap is not None:
            gap = self._strings.setdefault(gap, gap)
        self.sequence.append(
            SeenLine(
                lineno,
                value["rollout_id"],
                outcome["reward"],
                coordinates,
                parent,
                role,
                gap,
                bool(value["messages"]),
            )
        )
        self.run_ids[value["run_id"]] += 1
        self._check_id(value, where)
        self._check_reward_source(role, outcome, where)

    def observe(self, raw: bytes, lineno: int) -> None:
        where = f"{self.path}:{lineno}"
        self.lines += 1
        try:
            value = _ledger_json(raw)
        except ValueError as error:
            why = str(error) if isinstance(error, _NotALedgerLine) else f"not JSON ({error})"
            unreadable = MalformedLedgerLine(f"{where}: {why}")
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
        self.gap_kinds.update(later.gap_kinds)
        self.worker_full_transcripts += later.worker_full_transcripts
        for mine, theirs in ((self.rewards_by_role, later.rewards_by_role), (self.costs_by_role, later.costs_by_role)):
            for role, (count, total) in theirs.items():
                count_and_sum = mine.setdefault(role, [0, Fraction(0)])
                count_and_sum[0] += count
                count_and_sum[1] += total
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
        self.wrong_reward_sources += later.wrong_reward_sources
        self.reward_source_problems += later.reward_source_problems[
            : SAMPLE_SIZE - len(self.reward_source_problems)
        ]


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
        sample=_sample(
            [f"cwd: {s}" for s in cwd_result.sample] + [f"session: {s}" for s in session_result.sample]
        ),
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
    problems += [
        f"{ledger.path}:{lineno}: parent {parent} is no supervisor line"
        for lineno, parent in orphans[:SAMPLE_SIZE]
    ]
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


def _not_in_place(expected_ids: list[str], seen_ids: list[str], in_order: bool) -> int:
    """How many lines keep the ledger from being the expected sequence: those expected but not
    there plus those there but not expected; 1 for a ledger holding exactly the expected lines
    in another order."""
    expected, seen = Counter(expected_ids), Counter(seen_ids)
    absent_or_extra = (expected - seen).total() + (seen - expected).total()
    return absent_or_extra or (0 if in_order else 1)


def _same_reward(seen: Any, expected: Any) -> bool:
    if expected is None or seen is None:
        return seen is expected
    return _is_number(seen) and seen == expected


_FAULT_WORDS: dict[str, Callable[[SeenLine, ExpectedLine, str | None], str]] = {
    "rewards": lambda seen, line, _: (
        f"reward {seen.reward!r}, but the inputs give {line.what} the reward {line.reward!r}"
    ),
    "coordinates": lambda seen, line, _: (
        f"(candidate_id, generation, candidate_index, instance_id, rep) is {seen.coordinates!r},"
        f" but {line.what} is {line.coordinates!r}"
    ),
    "roles_or_parents": lambda seen, line, _: (
        f"role {seen.role!r} with parent_rollout_id {seen.parent!r}, but {line.what}"
        f" is a {line.parts[0]} line with parent_rollout_id {line.parent!r}"
    ),
    "gaps": lambda seen, line, why: str(why),
}


def inputs_match_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """The ledger holds exactly the lines the inputs name, in their order: every line's id is
    the one its invocation must have, and follows from its own fields; every line is of this
    round (`run_id`); every supervisor's reward is its cell's verdict, inherited by its workers,
    and every proposer's its candidate's resolved fraction, each with its role's reward_source;
    every line has its invocation's role and parent (a worker's supervisor, else null) and the
    gap the inputs give it (see _gap_problem).

    The counting checks prove nothing is missing or doubled; this one proves that what is there
    belongs where it is: a worker moved under another supervisor, a line of another round, a
    changed reward or instance id, a made-up gap line or a reordered ledger all fail it."""
    if inputs.expected is None:
        raise ValueError("the inputs were recounted without the opencode store: worker lines cannot be named")
    problems: list[str] = []
    foreign = {run_id: n for run_id, n in ledger.run_ids.items() if run_id != inputs.run_id}
    problems += [
        f"{n} line(s) of run_id {run_id!r}, not this round's {inputs.run_id!r}"
        for run_id, n in foreign.items()
    ]
    problems += ledger.id_problems
    expected_ids = [line.rollout_id for line in inputs.expected]
    seen_ids = [line.rollout_id for line in ledger.sequence]
    out_of_place = 0
    if seen_ids != expected_ids:
        index = next(
            (
                i
                for i, (seen, expected) in enumerate(zip(seen_ids, expected_ids, strict=False))
                if seen != expected
            ),
            min(len(seen_ids), len(expected_ids)),
        )
        out_of_place = ledger.sequence[index].lineno if index < len(ledger.sequence) else ledger.lines + 1
        wanted = inputs.expected[index].what if index < len(expected_ids) else "the end of the ledger"
        found = seen_ids[index] if index < len(seen_ids) else "the end of the ledger"
        problems.append(f"{ledger.path}:{out_of_place}: expected {wanted}, found {found}")
    expected_by_id = {line.rollout_id: line for line in inputs.expected}
    # Per kind of fault: how many lines have it, and the first SAMPLE_SIZE (worded below).
    wrong: dict[str, list[Any]] = {kind: [0, []] for kind in _FAULT_WORDS}
    lines_at_fault: set[int] = set()

    def fault(kind: str, seen: SeenLine, line: ExpectedLine, why: str | None = None) -> None:
        tally = wrong[kind]
        tally[0] += 1
        lines_at_fault.add(seen.lineno)
        if len(tally[1]) < SAMPLE_SIZE:
            tally[1].append(f"{ledger.path}:{seen.lineno}: {_FAULT_WORDS[kind](seen, line, why)}")

    for seen in ledger.sequence:
        line = expected_by_id.get(seen.rollout_id)
        if line is None:
            continue
        if not _same_reward(seen.reward, line.reward):
            fault("rewards", seen, line)
        # `==` on tuples: 1 == 1.0 would pass a float generation, but the schema refuses one first.
        if seen.coordinates != line.coordinates:
            fault("coordinates", seen, line)
        # rollout-v1.md: a worker's parent is its supervisor; a supervisor's and a proposer's is null.
        if seen.role != line.parts[0] or seen.parent != line.parent:
            fault("roles_or_parents", seen, line)
        gap_problem = _gap_problem(seen, line)
        if gap_problem is not None:
            fault("gaps", seen, line, gap_problem)
    for _, sample in wrong.values():
        problems += sample
    problems += ledger.reward_source_problems
    foreign_lines = sum(foreign.values())
    faults = sum(count for count, _ in wrong.values()) + ledger.wrong_reward_sources
    return AuditResult(
        passed=not (foreign or ledger.ids_not_matching_fields or out_of_place or faults),
        expected=len(expected_ids),
        seen=len(seen_ids),
        # Lines of another run and lines whose id does not fit their fields carry ids the
        # inputs do not give: they are among the lines absent or extra.
        missing=_not_in_place(expected_ids, seen_ids, in_order=not out_of_place)
        + len(lines_at_fault)
        + ledger.wrong_reward_sources,
        sample=_sample(problems),
        details={
            "run_id": inputs.run_id,
            "lines_of_another_run": foreign_lines,
            "ids_not_matching_fields": ledger.ids_not_matching_fields,
            "first_line_out_of_place": out_of_place,
            **{f"wrong_{kind}": count for kind, (count, _) in wrong.items()},
            "wrong_reward_sources": ledger.wrong_reward_sources,
        },
    )


def _as_double(value: Fraction) -> float | None:
    try:
        return float(value)
    except OverflowError:  # a sum no double holds: the stats write null
        return None


def _within_rounding(exact: float, stated: float, decimals: int) -> bool:
    """`stated` is `exact` rounded to `decimals` decimals, as a double."""
    try:
        ulps = 4 * math.ulp(max(abs(exact), abs(stated)))
        return abs(exact - stated) <= 0.5 * 10.0**-decimals + ulps
    except OverflowError:  # an integer written beyond any double: no rounding of the ledger's sum
        return False


def _sums_problems(
    key: str, stated: Any, recounted: dict[str, list[Any]], count_key: str, value_key: str, *, mean: bool
) -> list[str]:
    """Per role, the stats' count and sum (or mean) of rewards or costs against the ledger's.
    Stated values are rounded (means to 12 decimals, costs to 6): compared within half a unit
    of that last decimal, plus the few units in the last place of a double that the writer's
    division and rounding may add."""
    expected = {}
    for role, (count, total) in recounted.items():
        value = _as_double(total / count if mean else total)
        expected[role] = (count, value)
    seen = {}
    for role, entry in (stated or {}).items() if isinstance(stated, dict) else ():
        seen[role] = (entry.get(count_key), entry.get(value_key)) if isinstance(entry, dict) else (None, None)
    problems = []
    for role in sorted(set(expected) | set(seen), key=str):
        (count, value), (stated_count, stated_value) = expected.get(role, (0, None)), seen.get(role, (0, None))
        close = value is None and stated_value is None or (
            _is_number(value) and _is_number(stated_value) and _within_rounding(value, stated_value, 12 if mean else 6)
        )
        if count != stated_count or not close:
            problems.append(
                f"{key}.{role}: stats say {count_key} {stated_count}, {value_key} {stated_value}; "
                f"ledger holds {count}, {value}"
            )
    return problems


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
    # Gap lines by reason, each gap classified by this module's reading of its wording.
    by_gap = dict(sorted(ledger.gap_kinds.items()))
    if stats.get("byGapReason") != by_gap:
        problems.append(f"byGapReason: stats say {stats.get('byGapReason')}, ledger holds {by_gap}")
    problems += _sums_problems(
        "rewardByRole", stats.get("rewardByRole"), ledger.rewards_by_role, "labeled", "mean", mean=True
    )
    problems += _sums_problems(
        "costUsdByRole", stats.get("costUsdByRole"), ledger.costs_by_role, "linesWithCost", "usd", mean=False
    )
    for key, held in _join_counters(ledger).items():
        if stats.get(key) != held:
            problems.append(f"{key}: stats say {stats.get(key)}, ledger holds {held}")
    # The store was read, or it was not: its availability shows in the worker lines.
    available = stats.get("opencodeDbAvailable")
    store_unavailable = ledger.gap_kinds["opencode_store_unavailable"]
    sessions_read = ledger.worker_full_transcripts + ledger.gap_kinds["opencode_session_empty"]
    if available is True and store_unavailable:
        problems.append(
            f"opencodeDbAvailable: stats say true, yet {store_unavailable} worker line(s) say the store was unavailable"
        )
    elif available is False and sessions_read:
        problems.append(
            f"opencodeDbAvailable: stats say false, yet {sessions_read} worker line(s) hold a session read from it"
        )
    elif not isinstance(available, bool):
        problems.append(f"opencodeDbAvailable: stats say {available!r}, not true or false")
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
        details={
            "reward_labeled": ledger.reward_labeled,
            "gap_lines": ledger.gap_lines,
            "full_transcripts": ledger.full_transcripts,
        },
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


def audit_inputs_match(
    out_dir: Path, ledger_path: Path, opencode_db: Path, claude_projects: Path | None = None
) -> AuditResult:
    return inputs_match_verdict(
        recount_inputs(out_dir, opencode_db, claude_projects=claude_projects), recount_ledger(ledger_path)
    )


def audit_integrity(ledger_path: Path) -> AuditResult:
    return integrity_verdict(recount_ledger(ledger_path))


def audit_stats(ledger_path: Path, stats_path: Path) -> AuditResult:
    return stats_verdict(recount_ledger(ledger_path), stats_path)


def cells_without_worker_list(out_dir: Path) -> list[str]:
    """Cells whose arm ran (runDir known) but whose result.json is missing or unreadable."""
    return recount_inputs(out_dir, None).cells_without_worker_list
