"""An Inspect `.eval` log written one sample at a time, the same bytes for the same samples.

An `.eval` log is a ZIP archive (Inspect's log format, `inspect_ai/log/_recorders/eval.py`):
one `samples/<id>_epoch_<epoch>.json` member per sample, `summaries.json` (the list the viewer
shows) and `header.json` (the `EvalLog` without its samples), written last, as Inspect does.

Inspect's own writer (`write_eval_log`) takes a whole `EvalLog`: every sample held in memory
at once and buffered again before it is written (each new sample compared with every buffered
one: 8,000 samples took 68 s), and each member stamped with the clock. This writer streams: a
sample is compressed into the archive as it comes (zip_stream.py) and its summary goes to a
temporary file that becomes `summaries.json` at the end.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from rollout_assets.inspect_logs.zip_stream import ZipStream

SUMMARIES_MEMBER = "summaries.json"
HEADER_MEMBER = "header.json"


def sample_member(sample_id: int | str, epoch: int = 1) -> str:
    return f"samples/{sample_id}_epoch_{epoch}.json"


def _without_lone_surrogates(value: Any) -> Any:
    """`value` with each lone UTF-16 surrogate written as its escape text (`\\ud83d`), as Inspect
    writes a string UTF-8 cannot carry."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {key: _without_lone_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    return value


def json_bytes(value: Any) -> bytes:
    """Compact JSON of a plain value: orjson's, or, for what orjson refuses (a lone surrogate, an
    integer beyond 64 bits), the standard module's with lone surrogates escaped."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        cleaned = _without_lone_surrogates(value)
        return json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


class EvalZipWriter:
    """Writes one `.eval` log at `path`: `add` each sample in order, then `finish` with the
    header. Leaving the `with` block on an error closes the files; the caller removes the log."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.samples = 0
        self._file: BinaryIO = open(path, "wb")
        self._zip = ZipStream(self._file)
        self._summaries: BinaryIO = tempfile.TemporaryFile(prefix="inspect-summaries-")

    def add(self, sample_id: int, sample: bytes, summary: bytes) -> None:
        """Compress one sample's JSON into the log and keep its summary's for the end."""
        self._zip.add(sample_member(sample_id), sample)
        self._summaries.write(b"," if self.samples else b"[")
        self._summaries.write(summary)
        self.samples += 1

    def finish(self, header: bytes) -> None:
        """Write `summaries.json` (streamed from the temporary file) and `header.json`, and close."""
        self._summaries.write(b"]" if self.samples else b"[]")
        self._summaries.seek(0)
        self._zip.add_stream(SUMMARIES_MEMBER, self._summaries)
        self._zip.add(HEADER_MEMBER, header)
        self._zip.close()
        self._close_files()

    def _close_files(self) -> None:
        try:
            self._file.close()
        finally:
            self._summaries.close()

    def __enter__(self) -> EvalZipWriter:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if error is not None:
            self._zip.discard()
            self._close_files()
