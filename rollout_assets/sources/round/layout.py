"""Where a round's own files are: the outDir, its campaign folders (`improve-run/baseline`,
`improve-run/gen-<g>/candidate-<i>`, docs/input-formats.md §1) and the rules every reader of
the round lists folders and opens optional files by. A folder or file that is there but
cannot be looked at stops the round (RoundInputError); one that is not there is absent."""

from __future__ import annotations

import errno
import itertools
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

from rollout_assets.io import integer_or_none, open_regular_file
from rollout_assets.sources.round.errors import RoundInputError


BASELINE_GENERATION = -1
BASELINE_CANDIDATE_INDEX = -1


# As the seed's JavaScript patterns: ASCII digits only (re.ASCII), and the name must end at
# the end (`\Z`; Python's `$` would also match before a trailing newline).
_GENERATION_DIR = re.compile(r"^gen-(\d+)\Z", re.ASCII)
_CANDIDATE_DIR = re.compile(r"^candidate-(\d+)\Z", re.ASCII)


def candidate_id(generation: int, candidate_index: int) -> str:
    """`baseline` for generation -1 / candidate -1, else `gen<g>-cand<i>`."""
    if generation == BASELINE_GENERATION and candidate_index == BASELINE_CANDIDATE_INDEX:
        return "baseline"
    return f"gen{generation}-cand{candidate_index}"


def resolve_out_dir(out_dir: str | os.PathLike[str]) -> Path:
    """The outDir as an absolute path (not its real path: symlinked rounds keep their name)."""
    return Path(os.path.abspath(os.fspath(out_dir)))


def discover_campaigns(out_dir: Path) -> list[tuple[int, int, Path]]:
    """(generation, candidate index, campaign dir) of the baseline and every candidate, in order."""
    improve_run = out_dir / "improve-run"
    campaigns: list[tuple[int, int, Path]] = []
    if is_folder(improve_run / "baseline"):
        campaigns.append((BASELINE_GENERATION, BASELINE_CANDIDATE_INDEX, improve_run / "baseline"))
    if not is_folder(improve_run):
        return campaigns
    candidates: list[tuple[int, int, Path]] = []
    for generation_dir in _sub_directories(improve_run):
        generation_match = _GENERATION_DIR.match(generation_dir.name)
        if generation_match is None or not is_folder(generation_dir):
            continue
        for candidate_dir in _sub_directories(generation_dir):
            candidate_match = _CANDIDATE_DIR.match(candidate_dir.name)
            if candidate_match is None or not is_folder(candidate_dir):
                continue
            candidates.append(
                (
                    number_in_name(generation_match[1], generation_dir),
                    number_in_name(candidate_match[1], candidate_dir),
                    candidate_dir,
                )
            )
    candidates.sort(key=lambda c: (c[0], c[1], c[2].name))
    # `gen-1` and `gen-01` name the same generation: two campaigns of one candidate would give
    # their lines the same rollout ids, and a shot could not say which one it proposed.
    for (generation, index, first), (next_generation, next_index, second) in itertools.pairwise(candidates):
        if (generation, index) == (next_generation, next_index):
            raise RoundInputError(
                f"{first} and {second}: two campaign directories of generation {generation}, candidate {index}"
            )
    return campaigns + candidates


def number_in_name(digits: str, path: Path) -> int:
    """A generation, candidate or shot number read from a folder or file name. Beyond 64 bits
    it would not read back as the integer the line says (see integer_or_none)."""
    number = integer_or_none(int(digits))
    if number is None:
        raise RoundInputError(f"{path}: the number {digits} in its name is too large (more than 64 bits)")
    return number


def sorted_names(directory: Path) -> list[str]:
    """The names in a folder of the round, sorted; RoundInputError when it cannot be listed."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entry.name for entry in entries)
    except OSError as error:
        raise RoundInputError(f"{directory}: cannot list directory ({error.strerror or error})") from error


def _sub_directories(directory: Path) -> list[Path]:
    return [directory / name for name in sorted_names(directory)]


def is_folder(path: str | Path) -> bool:
    """Whether `path` is a folder (following links); a path the process may not look at stops the round."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        if error.errno == errno.ELOOP:
            return False
        raise RoundInputError(
            f"{path}: cannot tell whether it is a folder ({error.strerror or error})"
        ) from error


def open_if_there(path: Path, what: str) -> BinaryIO | None:
    """An optional file of the round, open; None when there is none. One that is there but
    cannot be read (a FIFO, a folder, no permission) stops the round: reading it as absent
    would change the lines unseen."""
    try:
        return open_regular_file(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise RoundInputError(f"{path}: cannot read the {what} ({error.strerror or error})") from error
