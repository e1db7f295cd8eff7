"""The one base error for "this round cannot be materialized as it is".

Every error that a round's inputs or outputs cause (a corrupt file, a round that changed
while it was read, a stage built from other inputs, a ledger that would lose transcripts)
derives from `RoundError`. Its message is one sentence that names the file and the problem;
the command line prints it and exits 1, the Dagster layer turns it into a step `Failure`
(see `rollout_assets/defs/failures.py`). Anything else that escapes is a bug and keeps its
stack trace.
"""

from __future__ import annotations


class RoundError(Exception):
    """This round cannot be materialized as it is; the message says which file and why."""
