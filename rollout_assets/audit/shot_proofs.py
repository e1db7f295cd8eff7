"""The proofs of a proposer line's claim, from the shot's receipt and its worktree's transcript
files as the audit reads them (docs/input-formats.md §3, §5, §6): no transcript matched the
shot's window; the one that matched holds no conversation; a folder or file of the worktree
cannot be read; or, for a joined line, its transcript is a file of the worktree that starts
inside the window.

Each proof returns None when the inputs warrant the claim, else what they hold instead. A claim
the audit cannot settle (a time stamp in a form it does not read, a file it cannot read) is not
warranted either: a gap line needs a proof, not the absence of a disproof.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rollout_assets.audit.shots import ProposerWorktree
from rollout_assets.audit.strict_json import input_json
from rollout_assets.audit.times import UNREAD, ShotWindow, epoch_ms
from rollout_assets.audit.transcripts import TranscriptReading, listing_problem, read_transcript
from rollout_assets.audit.wording import EMPTY_TRANSCRIPT_GAP, UNREADABLE_TRANSCRIPTS_GAP, no_transcript_gap

# The file primitive, not the reader: opens without blocking on a FIFO, refuses what is no file.
from rollout_assets.io import read_regular_file


@dataclass
class ShotEvidence:
    """What the inputs hold for one shot: its window and which of its worktree's transcript
    files qualify for it (paths in the worktree's listing order)."""

    window: ShotWindow
    qualifying: list[tuple[str, str]] = field(default_factory=list)  # (path, its start) in the window
    # why the audit cannot tell whether some other file qualifies; None when it can
    unsettled: str | None = None


class ShotProofs:
    """The proposer claims of one ledger, each shot's evidence read once, each transcript file
    read once however many shots share its worktree."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self._starts: dict[str, TranscriptReading] = {}
        self._evidence: dict[str, ShotEvidence] = {}

    def _reading(self, path: str) -> TranscriptReading:
        reading = self._starts.get(path)
        if reading is None:
            reading = self._starts[path] = read_transcript(path, to_the_end=False)
        return reading

    def _window(self, shot: ProposerWorktree) -> ShotWindow:
        """The receipt's times, read as the seed reads a receipt: a file that is missing, cannot
        be read or is not JSON, or a `receipt` that is no object, has none."""
        try:
            document = input_json(read_regular_file(self.out_dir / shot.receipt.relative_path))
        except (OSError, ValueError):
            document = None
        receipt = document.get("receipt") if isinstance(document, dict) else None
        receipt = receipt if isinstance(receipt, dict) else {}
        return ShotWindow(receipt.get("startedAt"), receipt.get("completedAt"))

    def evidence(self, shot: ProposerWorktree) -> ShotEvidence:
        found = self._evidence.get(shot.receipt.relative_path)
        if found is None:
            found = self._evidence[shot.receipt.relative_path] = self._read_evidence(shot)
        return found

    def _read_evidence(self, shot: ProposerWorktree) -> ShotEvidence:
        evidence = ShotEvidence(self._window(shot))
        readings = [(path, self._reading(path)) for path in shot.transcripts or ()]
        candidates = [(path, reading.start) for path, reading in readings if reading.main_chain]
        unread_files = [(path, reading.unreadable) for path, reading in readings if reading.unreadable]
        if shot.unreadable_folder is not None:
            evidence.unsettled = "the audit cannot list the project folder {} ({})".format(
                *shot.unreadable_folder
            )
        elif unread_files:
            evidence.unsettled = "the audit cannot read the transcript {} ({})".format(*unread_files[0])
        window = evidence.window
        if window.only_candidate_rule:
            # A file the audit cannot read may be a second candidate: then none is the only one.
            if evidence.unsettled is None and len(candidates) == 1 and candidates[0][1] is not None:
                evidence.qualifying.append((candidates[0][0], str(candidates[0][1])))
            return evidence
        if window.unread is not None:
            if any(start is not None for _, start in candidates):
                evidence.unsettled = f"the receipt's {window.unread} is a time the audit does not read"
            return evidence
        for path, start in candidates:
            if start is None:
                continue
            ms = epoch_ms(start)
            if ms is UNREAD:
                evidence.unsettled = (
                    f"the transcript {path} starts at {start!r}, a time the audit does not read"
                )
            elif isinstance(ms, int) and window.contains(ms):
                evidence.qualifying.append((path, start))
        return evidence

    def no_transcript_problem(self, shot: ProposerWorktree, gap: str) -> str | None:
        """'no claude transcript matched worktree W in the shot's time window': no file of W's
        project folders has a main-chain start that qualifies for the shot."""
        if gap != no_transcript_gap(shot.worktree):
            return f"the gap does not name the shot's worktree {shot.worktree}"
        evidence = self.evidence(shot)
        if evidence.qualifying:
            path, start = evidence.qualifying[0]
            more = len(evidence.qualifying) - 1
            return f"the transcript {path} starts at {start} and qualifies, by {evidence.window}" + (
                f"; so do {more} more of the worktree's transcripts" if more else ""
            )
        if evidence.unsettled is not None:
            return f"the audit cannot show that no transcript qualifies: {evidence.unsettled}"
        return None

    def _qualifying_problem(self, shot: ProposerWorktree, path: str) -> str | None:
        """`path` is a transcript file of the shot's worktree that qualifies for the shot."""
        if path not in (shot.transcripts or ()):
            folders = ", ".join(shot.folders) or "none"
            return f"{path} is no transcript file of the worktree's project folders ({folders})"
        evidence = self.evidence(shot)
        if any(path == qualifying for qualifying, _ in evidence.qualifying):
            return None
        if evidence.unsettled is not None:
            return f"the audit cannot show that {path} qualifies: {evidence.unsettled}"
        reading = self._reading(path)
        start = "has no main-chain time stamp" if reading.start is None else f"starts at {reading.start}"
        return f"the transcript {path} {start} and does not qualify, by {evidence.window}"

    def empty_transcript_problem(self, shot: ProposerWorktree, gap: str) -> str | None:
        """'claude transcript T matched the shot's time window but holds no conversation
        messages': T qualifies for the shot, and no line of its main chain is a message."""
        match = EMPTY_TRANSCRIPT_GAP.match(gap)
        assert match is not None
        path = match[1]
        problem = self._qualifying_problem(shot, path)
        if problem is not None:
            return problem
        reading = read_transcript(path, to_the_end=True)
        if reading.unreadable is not None:
            return f"the audit cannot read the transcript {path} ({reading.unreadable})"
        if reading.conversation:
            return f"the transcript {path} holds conversation messages"
        return None

    def unreadable_problem(self, shot: ProposerWorktree, gap: str) -> str | None:
        """'claude transcripts of worktree W cannot be read (P: why)': P is a project folder of
        W or one of its transcript files, and the audit cannot read it either."""
        match = UNREADABLE_TRANSCRIPTS_GAP.match(gap)
        assert match is not None
        worktree, path = match[1], match[2]
        if worktree != shot.worktree:
            return f"the gap does not name the shot's worktree {shot.worktree}"
        if path in shot.folders:
            why = listing_problem(path)
            return None if why is not None else f"the audit lists the project folder {path}"
        if path in (shot.transcripts or ()):
            reading = read_transcript(path, to_the_end=True)
            return None if reading.unreadable is not None else f"the audit reads the transcript {path}"
        return f"{path} is neither a project folder of the worktree nor one of its transcript files"

    def joined_problem(self, shot: ProposerWorktree, transcript_ref: object) -> str | None:
        """A joined line: its transcript_ref is a file of the worktree that qualifies for the shot."""
        if not isinstance(transcript_ref, str):
            return f"its transcript_ref {transcript_ref!r} names no transcript file"
        return self._qualifying_problem(shot, transcript_ref)
