"""Rows into Arrow without pandas (training/arrow_rows.py), in a fresh interpreter: the
conversion leaves pandas unimported, and pandas works as always afterwards."""

import subprocess
import sys

SCRIPT = """
import sys
import pyarrow as pa
from rollout_assets.training.arrow_rows import record_batch

schema = pa.schema([("name", pa.string()), ("reward", pa.float64())])
batch = record_batch([{"name": "a", "reward": 1}, {"name": "b", "reward": None}], schema)
assert batch.to_pylist() == [{"name": "a", "reward": 1.0}, {"name": "b", "reward": None}]
assert "pandas" not in sys.modules, "pandas imported by the conversion"
pa.array(["more"])  # pyarrow asks no more
assert "pandas" not in sys.modules

import pandas as pd

assert pa.Table.from_batches([batch]).to_pandas()["name"].tolist() == ["a", "b"]
assert pa.Table.from_pandas(pd.DataFrame({"x": [1]})).num_rows == 1
assert pa.array(pd.Series([1, 2])).to_pylist() == [1, 2]
print("ok")
"""


def test_rows_become_arrow_without_importing_pandas() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
