"""The `.eval` container written front to back: read by Python's zipfile (every CRC checked) and by
Inspect's own reader, ZIP64 records included, and the same bytes for the same members."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import inspect_ai.log  # noqa: F401 (Inspect teaches zipfile its Zstandard members)
from inspect_ai.log import EvalSampleSummary, read_eval_log, read_eval_log_sample_summaries

from rollout_assets.inspect_logs.eval_zip import EvalZipWriter, json_bytes
from rollout_assets.inspect_logs.header import eval_header
from rollout_assets.inspect_logs.tally import LogTally
from rollout_assets.inspect_logs.zip_stream import ZipStream

MEMBERS = {"samples/1_epoch_1.json": b'{"a":1}', "empty.json": b"", "big.json": b"x" * 3_000_000}


def _archive(members: dict[str, bytes], streamed: str | None = None) -> bytes:
    buffer = io.BytesIO()
    archive = ZipStream(buffer)
    for name, data in members.items():
        if name == streamed:
            archive.add_stream(name, io.BytesIO(data))
        else:
            archive.add(name, data)
    archive.close()
    return buffer.getvalue()


def test_every_member_reads_back_with_its_crc_and_a_fixed_date() -> None:
    data = _archive(MEMBERS, streamed="big.json")

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None  # every member's CRC-32 checked
        assert {name: archive.read(name) for name in archive.namelist()} == MEMBERS
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert {info.compress_type for info in archive.infolist()} == {93}  # Zstandard, as Inspect writes


def test_the_same_members_give_the_same_bytes() -> None:
    assert _archive(MEMBERS) == _archive(MEMBERS)
    assert _archive(MEMBERS, streamed="big.json") == _archive(MEMBERS, streamed="big.json")


def test_a_log_past_65535_members_carries_zip64_end_records_that_inspect_reads(tmp_path: Path) -> None:
    path = tmp_path / "many.eval"
    count = 65_600
    tally = LogTally("many.eval", "worker", "baseline", run_id="run", first_captured="2025-01-15T10:30:00Z")
    tally.last_captured, tally.samples = tally.first_captured, count
    with EvalZipWriter(path) as log:
        for sample_id in range(1, count + 1):
            summary = {"id": sample_id, "epoch": 1, "input": "", "target": "", "completed": True}
            log.add(sample_id, json_bytes({"id": sample_id, "epoch": 1, "input": "", "target": ""}), json_bytes(summary))
        log.finish(eval_header(tally))

    tail = path.read_bytes()[-120:]
    assert b"PK\x06\x06" in tail and b"PK\x06\x07" in tail  # the ZIP64 end record and its locator
    with zipfile.ZipFile(path) as archive:
        assert len(archive.namelist()) == count + 2
    summaries = read_eval_log_sample_summaries(str(path))
    assert [summary.id for summary in summaries] == list(range(1, count + 1))
    assert all(isinstance(summary, EvalSampleSummary) for summary in summaries[:3])
    assert read_eval_log(str(path), header_only=True).eval.task == "many"
