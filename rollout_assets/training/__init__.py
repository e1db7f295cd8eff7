"""From ledger lines to rows people train on: SFT rows, preference pairs and GRPO groups.

No Dagster here. One filter (`filter.py`) decides which lines are trainable; every line of a
ledger ends either in a row or in a drop reason, per dataset. The ledger is read twice, as
bytes: once to decide (a few fixed-size keys per line: index, offset, reward, digests), once
to write the rows of the lines kept, so memory does not grow with the transcripts.
See docs/training.md for the rows, the filter and the files.
"""

from rollout_assets.training.export import TrainingExport, export_training
from rollout_assets.training.filter import DROP_REASONS, TrainingFilter

__all__ = ["DROP_REASONS", "TrainingExport", "TrainingFilter", "export_training"]
