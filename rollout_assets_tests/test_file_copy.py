"""copy_range: the kernel's copy where it works, the same bytes through a buffer where not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout_assets.file_copy import CopyTargetError, copy_range

# Larger than one buffered block (1 MiB), not a multiple of it, and not all one byte.
DATA = bytes(range(256)) * (5 * 4096 + 3)


def _source(folder: Path) -> Path:
    path = folder / "source.bin"
    path.write_bytes(DATA)
    return path


def _copy(source: Path, target: Path, offset: int = 0, length: int | None = None, before: bytes = b"") -> int:
    with open(source, "rb") as reading, open(target, "wb") as writing:
        reading.seek(7)
        writing.write(before)
        writing.flush()
        copied = copy_range(reading.fileno(), writing.fileno(), offset, length)
        assert reading.tell() == 7  # the source's own position is left alone
        assert os.lseek(writing.fileno(), 0, os.SEEK_CUR) == len(before) + copied
    return copied


def test_copies_to_the_end_of_the_source_at_the_targets_position(tmp_path: Path) -> None:
    source, target = _source(tmp_path), tmp_path / "target.bin"

    assert _copy(source, target, offset=10, before=b"head") == len(DATA) - 10

    assert target.read_bytes() == b"head" + DATA[10:]


def test_copies_a_range_and_says_when_the_source_ends_first(tmp_path: Path) -> None:
    source = _source(tmp_path)

    assert _copy(source, tmp_path / "middle.bin", offset=3, length=1_500_000) == 1_500_000
    assert (tmp_path / "middle.bin").read_bytes() == DATA[3:1_500_003]
    assert _copy(source, tmp_path / "short.bin", offset=len(DATA) - 5, length=100) == 5
    assert (tmp_path / "short.bin").read_bytes() == DATA[-5:]


@pytest.mark.parametrize("length", [None, len(DATA) - 1])
def test_across_filesystems_the_same_bytes_through_a_buffer(
    tmp_path: Path, other_filesystem: Path, length: int | None
) -> None:
    # The kernel refuses a copy between two filesystems (EXDEV since Linux 5.19).
    source = _source(other_filesystem)

    assert _copy(source, tmp_path / "target.bin", offset=1, length=length) == len(DATA) - 1

    assert (tmp_path / "target.bin").read_bytes() == DATA[1:]


def test_a_source_longer_than_its_stat_says_is_copied_to_its_end(tmp_path: Path) -> None:
    # Files of /proc say they are empty; the copy goes on to where reading ends.
    target = tmp_path / "status.txt"
    with open("/proc/self/cmdline", "rb") as reading, open(target, "wb") as writing:
        assert os.fstat(reading.fileno()).st_size == 0
        copied = copy_range(reading.fileno(), writing.fileno())
    expected = Path("/proc/self/cmdline").read_bytes()

    assert copied == len(expected) > 0
    assert target.read_bytes() == expected


def test_a_target_that_cannot_be_written_is_a_target_error(tmp_path: Path) -> None:
    source, target = _source(tmp_path), tmp_path / "target.bin"
    target.write_bytes(b"")
    with open(source, "rb") as reading, open(target, "rb") as not_writable:
        with pytest.raises(CopyTargetError):
            copy_range(reading.fileno(), not_writable.fileno())


def test_a_source_that_cannot_be_read_is_no_target_error(tmp_path: Path) -> None:
    source, target = _source(tmp_path), tmp_path / "target.bin"
    with open(source, "ab") as not_readable, open(target, "wb") as writing:
        with pytest.raises(OSError) as raised:
            copy_range(not_readable.fileno(), writing.fileno())
    assert not isinstance(raised.value, CopyTargetError)
