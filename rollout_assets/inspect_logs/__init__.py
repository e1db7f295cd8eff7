"""A ledger as Inspect AI eval logs, for Inspect's log viewer (`inspect view`) and data frames.

Owns the conversion of `tangle.rollout.v1` lines into Inspect's log format: one `.eval` log per
(role, candidate) of a ledger, one sample per line, gap lines included (docs/viewing.md). No
Dagster here, and `inspect_ai` is imported only when logs are written (header.py), never by
importing this package.

    index.py     the first pass: which log each line goes to, where it lies in the file
    messages.py  a transcript as Inspect chat messages
    samples.py   a line as an Inspect sample and its summary
    tally.py     what a log's header counts of its samples
    header.py    Inspect's models: each log's header, the check of its first samples
    eval_zip.py  one `.eval` archive, streamed, the same bytes for the same samples
    folder.py    where the logs go, what may be replaced, the record that tells stale logs
    writer.py    the two passes, spread over the cores, swapped in whole
    viewer.py    the `inspect view` command that opens them
"""

from rollout_assets.inspect_logs.folder import InspectLogsRefused, logs_folder_for, stale_reason
from rollout_assets.inspect_logs.index import InspectLogsInputError
from rollout_assets.inspect_logs.writer import InspectLogsReport, write_inspect_logs

__all__ = [
    "InspectLogsInputError",
    "InspectLogsRefused",
    "InspectLogsReport",
    "logs_folder_for",
    "stale_reason",
    "write_inspect_logs",
]
