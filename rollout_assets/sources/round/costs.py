"""The round's cost ledger (`improve-run/cost-ledger.jsonl`, docs/input-formats.md §1): the
settled receipts' call ids, grouped by the campaign folder they were tagged with."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rollout_assets.io import NotJson, is_record, parse_json
from rollout_assets.sources.round.layout import open_if_there
from rollout_assets.sources.round.packed import PackedStrings


@dataclass
class CostLedger:
    """Settled cost-ledger receipts of a round, grouped by the campaign dir they were tagged with."""

    settled_by_run_dir: dict[str, PackedStrings] = field(default_factory=dict)
    lines: int = 0
    skipped: int = 0

    def settled_calls_for(self, campaign_dir: Path) -> PackedStrings:
        keys = {str(campaign_dir), os.path.realpath(campaign_dir)}
        found = [self.settled_by_run_dir[key] for key in sorted(keys) if key in self.settled_by_run_dir]
        if len(found) == 1:
            return found[0]
        return PackedStrings(call for calls in found for call in calls)


def read_cost_ledger(out_dir: Path) -> CostLedger:
    """`improve-run/cost-ledger.jsonl`: only settled receipts with a string callId count; garbage is skipped."""
    ledger = CostLedger()
    handle = open_if_there(out_dir / "improve-run" / "cost-ledger.jsonl", "cost ledger")
    if handle is None:
        return ledger
    with handle:
        for raw_line in handle:
            if not raw_line.strip():
                continue
            ledger.lines += 1
            try:
                entry = parse_json(raw_line)
            except NotJson:
                ledger.skipped += 1
                continue
            record = entry.get("record") if is_record(entry) else None
            if not is_record(record) or record.get("status") != "settled":
                continue
            call_id = record.get("callId")
            tags = record.get("tags")
            run_dir = tags.get("runDir") if is_record(tags) else None
            if isinstance(call_id, str) and isinstance(run_dir, str):
                ledger.settled_by_run_dir.setdefault(run_dir, PackedStrings()).append(call_id)
    return ledger
