"""The `rounds` partitions: one dynamic partition per round directory under the rounds root.

Dagster validates nothing about dynamic partition keys, yet a key becomes a folder name
under the ledger root, a run tag and part of the UI's range syntax. So a key is the round
directory's own name, checked by the rule of rollout_assets/round_keys.py (re-exported here);
anything else is refused, with a message that says why.
"""

from __future__ import annotations

from dagster import DynamicPartitionsDefinition

from rollout_assets.round_keys import (  # noqa: F401 (re-exported: the partitions' key rule)
    LEDGER_ROOT_FILES,
    SUMMARY_FILE_NAME,
    InvalidRoundKey,
    round_key_problem,
    validate_round_key,
)

ROUNDS_PARTITIONS_NAME = "rounds"
ROUNDS = DynamicPartitionsDefinition(name=ROUNDS_PARTITIONS_NAME)
