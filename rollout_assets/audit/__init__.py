"""Independent recounts that prove a ledger dropped nothing (the asset checks' logic).

Each audit recounts what the round SHOULD produce straight from the inputs, by its own small
code path (its own directory walk, its own SQL, its own JSON reading), and compares it with
what the ledger holds. None of it calls the readers or the join it verifies: a check that
reuses the code it checks cannot fail, and is worth nothing. No Dagster here either.

The inputs are recounted once (`recount_inputs`) and the ledger is read once
(`recount_ledger`: every line parsed and validated against the schema, every audit's tally
taken in the same pass); each check's verdict is then a comparison of the two.

    wording.py       gap wordings and kinds, the id rule, reward sources
    strict_json.py   the audit's own JSON reading (inputs as the seed reads them, ledger lines strictly)
    folders.py       listing the round's folders; UnreadableRound
    cells.py         the campaigns' cells and the worker cwds their result.json lists
    stores.py        the opencode store's sessions, by the audit's own SQL on its private copy
    session_counts.py  the one grouped count of the messages each session's rows make
    store_counts.py  that count over the claimed sessions, spread over processes, kept on disk
    shots.py         the proposer receipts and their candidate transcript files
    inputs.py        recount_inputs: everything the inputs say, every expected line
    ledger.py        recount_ledger: one pass over the ledger (LedgerRecount), in parts
    typed_line.py    a ledger line decoded and validated in one pass (msgspec), else left to the models
    exact_sums.py    the recount's exact sums of rewards and costs, as whole units of 2**-1074
    result.py        AuditResult and the multiset comparison
    verdicts.py      the counting, integrity and stats verdicts
    inputs_match.py  the order check's verdict: every line where the inputs put it
    times.py         the audit's reading of a shot's time stamps, and the shot's window
    transcripts.py   the audit's reading of a Claude transcript file
    shot_proofs.py   the proofs of a proposer line's join or gap
    subagents.py     the audit's one-to-one join of shots to transcripts, their sub-agent
                     conversations and the token usage of each
    line_sessions.py the session of each worker line, its rows counted once for two verdicts
    gap_proofs.py    the gap check's verdict: every gap line's reason holds in the inputs
    usage.py         the audit's sums of token usage and spend, held against a line's cost
    usage_proofs.py  the usage check's verdict: every line's usage is its records' sum
"""

from rollout_assets.audit.folders import UnreadableRound
from rollout_assets.audit.gap_proofs import gaps_warranted_verdict
from rollout_assets.audit.inputs import ExpectedLine, InputsRecount, recount_inputs
from rollout_assets.audit.inputs_match import inputs_match_verdict
from rollout_assets.audit.ledger import LedgerRecount, MalformedLedgerLine, SeenLine, recount_ledger
from rollout_assets.audit.line_sessions import LineSessions
from rollout_assets.audit.result import SAMPLE_SIZE, AuditResult
from rollout_assets.audit.usage_proofs import usage_verdict
from rollout_assets.audit.verdicts import (
    integrity_verdict,
    proposers_verdict,
    stats_verdict,
    supervisors_verdict,
    workers_verdict,
)

__all__ = [
    "SAMPLE_SIZE",
    "AuditResult",
    "ExpectedLine",
    "InputsRecount",
    "LedgerRecount",
    "LineSessions",
    "MalformedLedgerLine",
    "SeenLine",
    "UnreadableRound",
    "gaps_warranted_verdict",
    "inputs_match_verdict",
    "integrity_verdict",
    "proposers_verdict",
    "recount_inputs",
    "recount_ledger",
    "stats_verdict",
    "supervisors_verdict",
    "usage_verdict",
    "workers_verdict",
]
