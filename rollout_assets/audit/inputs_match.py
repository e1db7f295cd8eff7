"""The order check's verdict (`inputs_match_verdict`): the ledger holds exactly the lines the
inputs name, in their order, each with the reward, coordinates, role, parent and gap the inputs
give it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from rollout_assets.audit.inputs import (
    NO_SESSION,
    NO_TRANSCRIPT,
    SESSION,
    STORE_UNAVAILABLE,
    SUBAGENT,
    ExpectedLine,
    InputsRecount,
)
from rollout_assets.audit.ledger import LedgerRecount, SeenLine
from rollout_assets.audit.result import SAMPLE_SIZE, AuditResult, sample
from rollout_assets.audit.spill import SpilledRows
from rollout_assets.audit.strict_json import is_number
from rollout_assets.audit.wording import (
    EMPTY_TRANSCRIPT_GAP,
    UNREADABLE_TRANSCRIPTS_GAP,
    empty_session_gap,
    no_session_gap,
    no_transcript_gap,
    store_unavailable_cause,
    store_unavailable_gap,
)


def _same_reward(seen: Any, expected: Any) -> bool:
    if expected is None or seen is None:
        return seen is expected
    return is_number(seen) and seen == expected


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


class _Faults:
    """Per kind of fault: how many lines have it, and the first SAMPLE_SIZE (worded)."""

    def __init__(self, path: Any):
        self.path = path
        self.counts = dict.fromkeys(_FAULT_WORDS, 0)
        self.samples: dict[str, list[str]] = {kind: [] for kind in _FAULT_WORDS}
        self.lines: set[int] = set()  # the lines with any fault

    def add(self, kind: str, seen: SeenLine, line: ExpectedLine, why: str | None = None) -> None:
        self.counts[kind] += 1
        self.lines.add(seen.lineno)
        if len(self.samples[kind]) < SAMPLE_SIZE:
            self.samples[kind].append(f"{self.path}:{seen.lineno}: {_FAULT_WORDS[kind](seen, line, why)}")


def _judged(inputs: InputsRecount, ledger: LedgerRecount) -> Iterator[SeenLine]:
    """The ledger's lines the inputs can name: all of them, but for the sub-agent (`agent`)
    lines when the recount was taken without the Claude projects folder (only its transcripts
    name them; the checks run with it)."""
    if inputs.claude_projects is not None:
        return ledger.sequence.stream()
    return (seen for seen in ledger.sequence.stream() if seen.role != "agent")


def _skipped_role(inputs: InputsRecount) -> str | None:
    return None if inputs.claude_projects is not None else "agent"


class ExpectedLookup:
    """What the inputs say of a ledger line, by its rollout_id, as a dict built from the expected
    lines in order would give it (the last of a doubled id), without holding them: in a ledger
    in order, the line at the same place; else the expected lines' index on disk."""

    def __init__(self, expected: SpilledRows):
        self.expected = expected
        self.doubled = set(expected.keys_counted_twice())

    def get(self, seen: SeenLine, in_place: ExpectedLine | None) -> ExpectedLine | None:
        rollout_id = seen.rollout_id
        if in_place is not None and in_place.rollout_id == rollout_id and rollout_id not in self.doubled:
            return in_place
        found: ExpectedLine | None = self.expected.last_with_key(seen.rollout_id)
        return found


def _compare(
    inputs: InputsRecount, expected: SpilledRows, ledger: LedgerRecount
) -> tuple[int, list[str], _Faults, int]:
    """One walk of the ledger's lines beside the expected ones: (the number of the first line
    that is not the expected one, 0 when all are; its problem), what is wrong with each line
    the inputs name (`_line_faults`), and how many lines were judged.

    Past the ledger's last line, the first line out of place is the number of the line after it."""
    lookup = ExpectedLookup(expected)
    faults = _Faults(ledger.path)
    out_of_place, problem, judged = 0, [], 0
    wanted_lines = expected.stream()
    for seen in _judged(inputs, ledger):
        judged += 1
        wanted = next(wanted_lines, None)
        if not out_of_place and (wanted is None or wanted.rollout_id != seen.rollout_id):
            out_of_place = seen.lineno
            what = wanted.what if wanted is not None else "the end of the ledger"
            problem = [f"{ledger.path}:{seen.lineno}: expected {what}, found {seen.rollout_id}"]
        line = lookup.get(seen, wanted)
        if line is not None:
            _line_faults(faults, seen, line)
    wanted = next(wanted_lines, None)
    if not out_of_place and wanted is not None:
        out_of_place = ledger.lines + 1
        problem = [f"{ledger.path}:{out_of_place}: expected {wanted.what}, found the end of the ledger"]
    return out_of_place, problem, faults, judged


def _line_faults(faults: _Faults, seen: SeenLine, line: ExpectedLine) -> None:
    """What is wrong with a ledger line the inputs name, against what they say of it."""
    if not _same_reward(seen.reward, line.reward):
        faults.add("rewards", seen, line)
    # `==` on tuples: 1 == 1.0 would pass a float generation, but the schema refuses one first.
    if seen.coordinates != line.coordinates:
        faults.add("coordinates", seen, line)
    # docs/line-format.md: a worker's parent is its supervisor, a sub-agent's (`agent`) its proposer;
    # a supervisor's and a proposer's is null.
    if seen.role != line.parts[0] or seen.parent != line.parent:
        faults.add("roles_or_parents", seen, line)
    gap_problem = _gap_problem(seen, line)
    if gap_problem is not None:
        faults.add("gaps", seen, line, gap_problem)


def _not_in_place(
    inputs: InputsRecount, expected: SpilledRows, ledger: LedgerRecount, out_of_place: int
) -> int:
    """How many lines keep the ledger from being the expected sequence: those expected but not
    there plus those there but not expected; 1 for a ledger holding exactly the expected lines
    in another order."""
    if not out_of_place:
        return 0
    return expected.keys_apart(ledger.sequence, skip_label=_skipped_role(inputs)) or 1


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
    foreign = {run_id: n for run_id, n in ledger.run_ids.items() if run_id != inputs.run_id}
    out_of_place, order_problem, faults, judged = _compare(inputs, inputs.expected, ledger)
    problems = [
        f"{n} line(s) of run_id {run_id!r}, not this round's {inputs.run_id!r}"
        for run_id, n in foreign.items()
    ]
    problems += ledger.id_problems + order_problem
    for kind_sample in faults.samples.values():
        problems += kind_sample
    problems += ledger.reward_source_problems
    wrong = sum(faults.counts.values()) + ledger.wrong_reward_sources
    return AuditResult(
        passed=not (foreign or ledger.ids_not_matching_fields or out_of_place or wrong),
        expected=len(inputs.expected),
        seen=judged,
        # Lines of another run and lines whose id does not fit their fields carry ids the
        # inputs do not give: they are among the lines absent or extra.
        missing=_not_in_place(inputs, inputs.expected, ledger, out_of_place)
        + len(faults.lines)
        + ledger.wrong_reward_sources,
        sample=sample(problems),
        details={
            "run_id": inputs.run_id,
            "lines_of_another_run": sum(foreign.values()),
            "ids_not_matching_fields": ledger.ids_not_matching_fields,
            "first_line_out_of_place": out_of_place,
            **{f"wrong_{kind}": count for kind, count in faults.counts.items()},
            "wrong_reward_sources": ledger.wrong_reward_sources,
        },
    )


def _gap_problem(seen: SeenLine, expected: ExpectedLine) -> str | None:
    """What is wrong with a line's transcript or gap, given what the inputs say of it; None
    when nothing is. A line must carry a transcript or say why not, in the gap the inputs
    give it; one the inputs leave open (a session or a shot's transcripts, neither read here)
    may carry its transcript or one of the gaps that can explain its absence."""
    rule, names = expected.gap, expected.parts[1:]
    if isinstance(rule, str):  # a supervisor's: always a gap line
        required = rule
    elif rule == STORE_UNAVAILABLE:
        required = store_unavailable_gap(names[0])
    elif rule == NO_SESSION:
        required = no_session_gap(names[0])
    elif rule == NO_TRANSCRIPT:
        required = no_transcript_gap(names[1])
    elif rule == SUBAGENT:
        if seen.has_messages and seen.gap is None:
            return None
        return f"gap {seen.gap!r}, but {expected.what} holds conversation messages: the line must carry them"
    else:
        if seen.has_messages:
            return None if seen.gap is None else f"gap {seen.gap!r} beside its transcript"
        if rule == SESSION:
            allowed = [empty_session_gap(names[1])]
            if seen.gap in allowed:
                return None
        else:
            allowed = [
                no_transcript_gap(names[1]),
                "claude transcript <one of its worktree's transcript files> ...",
                "claude transcripts of worktree ... cannot be read (<one of its transcript files>: ...)",
            ]
            empty = EMPTY_TRANSCRIPT_GAP.match(seen.gap or "")
            # Files are not opened here: any of them may be the one that could not be read.
            unreadable = UNREADABLE_TRANSCRIPTS_GAP.match(seen.gap or "")
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
    if seen.gap == required or (rule == STORE_UNAVAILABLE and store_unavailable_cause(seen.gap, names[0])[0]):
        return None  # the store's gap may say why it could not be read: the gap check holds the cause
    return f"gap {seen.gap!r}, but the inputs give {expected.what} the gap {required!r}"
