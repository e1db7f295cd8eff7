"""One part of the training data of a round, for bench.py to time on its own:

    python bench/training_step.py export LEDGER OUT_DIR   # the rows (what training_datasets does)
    python bench/training_step.py checks LEDGER OUT_DIR   # their checks (what the ten checks do)
"""

import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rollout_assets.training import export_training  # noqa: E402
from rollout_assets.training.files import TrainingFiles  # noqa: E402
from rollout_assets.training.verify import verify_training  # noqa: E402


def main() -> None:
    part, ledger, out_dir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if part == "export":
        export = export_training(ledger, out_dir, ledger.parent.name)
        print({name: report.rows for name, report in export.reports.items()})
    elif part == "checks":
        failed = [name for name, verdict in verify_training(ledger, TrainingFiles(out_dir), 0.05).items() if not verdict.passed]
        if failed:
            raise SystemExit(f"training checks failed: {failed}")
    else:
        raise SystemExit(f"unknown part {part!r}: export or checks")


if __name__ == "__main__":
    main()
