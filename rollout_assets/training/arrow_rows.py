"""Python rows into Arrow without pandas.

The first time pyarrow converts a Python list it asks whether the list is a pandas object, and
imports pandas to know: about 47 MiB held for the rest of the process, in the training export
(whose rows are dicts, never pandas objects) nearly a quarter of its peak. So the first conversion
of a process runs with pandas hidden from the import system, and makes pyarrow ask; pyarrow
then takes pandas for absent when it looks at a list. Nothing else changes: `import pandas` afterwards works as
always, and pyarrow's own pandas functions (`to_pandas`, `from_pandas`) import it again when
called. Where pandas is already imported, nothing is hidden.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


class _PandasRefused(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError(f"{name} is not imported while rows are converted to Arrow")
        return None


_asked = False  # whether pyarrow has asked about pandas in this process


@contextlib.contextmanager
def _pandas_hidden() -> Iterator[None]:
    global _asked
    if _asked or "pandas" in sys.modules:
        yield
        return
    import pyarrow as pa

    finder = _PandasRefused()
    sys.meta_path.insert(0, finder)
    try:
        # Converting a list makes pyarrow ask, whichever path the rows' types take later.
        pa.array([])
        yield
    finally:
        sys.meta_path.remove(finder)
        _asked = True


def record_batch(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """`rows` as one record batch of `schema`."""
    import pyarrow as pa

    with _pandas_hidden():
        return pa.RecordBatch.from_pylist(rows, schema=schema)
