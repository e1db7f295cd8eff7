"""Resources: where rounds, harness stores and ledgers live, and how the sensor waits.

Each is a `ConfigurableResource` bound in `rollout_assets.definitions`, its locations from an
environment variable with a local default:

| key             | resource         | variable (default)                                 |
|-----------------|------------------|----------------------------------------------------|
| locations       | RoundLocations   | the four below, as one, for the assets and checks  |
|   .rounds_root  | RoundsRoot       | ROLLOUT_ROUNDS_ROOT (./rounds)                     |
|   .opencode     | OpencodeDatabase | OPENCODE_DB (~/.local/share/opencode/opencode.db)  |
|   .claude       | ClaudeProjects   | CLAUDE_PROJECTS_DIR (~/.claude/projects)           |
|   .ledger_root  | LedgerRoot       | ROLLOUT_LEDGER_ROOT (./ledgers)                    |
| rounds_root     | RoundsRoot       | locations.rounds_root itself, for the sensor       |
| ledger_root     | LedgerRoot       | locations.ledger_root itself                       |
| round_discovery | RoundDiscovery   | ROLLOUT_QUIET_PERIOD_SECONDS (120)                 |

Misconfiguration gives one sentence that says what to set. The inputs are read-only, so a
ledger root that overlaps the rounds root or the Claude projects folder, or that holds the
opencode store, is refused before anything is written (`RoundLocations`, checked once when a
run sets it up), and so is a round's output folder that leads among them through a symlink.
A run writes a round's outputs only while it holds the round's lock (`round_lock.py`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from rollout_assets.defs.partitions import round_key_problem, validate_round_key
from rollout_assets.defs.round_lock import RoundLock, acquire_round_lock, release_round_lock
from rollout_assets.discovery import RetryPolicy, RoundDirs
from rollout_assets.errors import RoundError
from rollout_assets.paths import folder_relation, is_inside, real_path, sqlite_files
from rollout_assets.sources.claude import unreadable_folder_reason
from rollout_assets.stages import RoundOutputs


class ConfigurationError(RoundError, RuntimeError):
    """A resource points at something unusable; the message says which variable to set."""


def seconds_from_environment(variable: str, default: int, minimum: int) -> int:
    """A whole number of seconds from `variable`, or `default` when it is unset or empty.

    Read when the definitions load, so anything else stops the code location with one sentence
    naming the variable, its value and what is allowed, rather than running with a value
    the user did not ask for.
    """
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    if re.fullmatch(r"[0-9]+", raw) and int(raw) >= minimum:
        return int(raw)
    raise ConfigurationError(
        f"{variable}={raw!r} is not a whole number of seconds of at least {minimum}: set it to one "
        f"(for example {default}, the default) or unset it"
    )


def _absolute(path: str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(path)))


def is_round_dir(path: Path) -> bool:
    """A directory is a round when it holds `improve-run/` or `proposer-shots/`."""
    return (path / "improve-run").is_dir() or (path / "proposer-shots").is_dir()


class RoundsRoot(ConfigurableResource):
    """The folder holding one sub-directory (outDir) per round; the name is the partition key."""

    root_dir: str

    @property
    def path(self) -> Path:
        return _absolute(self.root_dir)

    def round_dir(self, round_key: str) -> Path:
        """The outDir of round `round_key`, which must exist."""
        validate_round_key(round_key)
        if not self.path.is_dir():
            raise ConfigurationError(
                f"rounds root {self.path} does not exist: set ROLLOUT_ROUNDS_ROOT to the folder holding round outDirs"
            )
        out_dir = self.path / round_key
        if not out_dir.is_dir():
            raise ConfigurationError(
                f"round {round_key!r} has no directory {out_dir} under the rounds root "
                "(moved or deleted? set ROLLOUT_ROUNDS_ROOT to the folder that holds it)"
            )
        return out_dir


class OpencodeDatabase(ConfigurableResource):
    """The opencode SQLite store holding worker sessions (opened read-only)."""

    path: str

    @property
    def db_path(self) -> Path:
        return _absolute(self.path)

    def unavailable_reason(self) -> str | None:
        if not self.db_path.is_file():
            return (
                f"opencode database {self.db_path} does not exist: worker sessions become labeled gap lines; "
                "set OPENCODE_DB to the opencode.db that holds them"
            )
        return None


class ClaudeProjects(ConfigurableResource):
    """The Claude Code projects folder holding proposer transcripts."""

    projects_dir: str

    @property
    def path(self) -> Path:
        return _absolute(self.projects_dir)

    def unavailable_reason(self) -> str | None:
        if not self.path.is_dir():
            return (
                f"Claude projects folder {self.path} does not exist: proposer shots become labeled gap lines; "
                "set CLAUDE_PROJECTS_DIR to the folder that holds the transcripts"
            )
        why = unreadable_folder_reason(self.path)
        if why is not None:
            return (
                f"Claude projects folder {self.path} cannot be read ({why}): proposer shots become labeled gap "
                "lines; run Dagster as a user who may read it"
            )
        return None


def _overlap_with_inputs(
    folder: Path, rounds_root: RoundsRoot, opencode: OpencodeDatabase, claude: ClaudeProjects
) -> tuple[str, str] | None:
    """(how outputs written in `folder` could land among the inputs, what a folder for outputs
    must be instead), or None when they never can: `folder` must neither be, hold nor lie inside
    the rounds root or the Claude projects folder, and must not hold the opencode store or the
    files SQLite keeps beside it (a round's ledger path could be the store). Symlinks are
    followed, as the writes would."""
    for inputs, name, variable in (
        (rounds_root.path, "rounds root", "ROLLOUT_ROUNDS_ROOT"),
        (claude.path, "Claude projects folder", "CLAUDE_PROJECTS_DIR"),
    ):
        relation = folder_relation(folder, inputs)
        if relation is not None:
            return (
                f"it {relation} the {name} {inputs}, and inputs are never written",
                f"apart from {variable}",
            )
    store = opencode.db_path
    for store_file in sqlite_files(store):
        if is_inside(store_file, folder):
            what = f"the opencode database {store}"
            if store_file != real_path(store):
                what = f"{store_file}, a file SQLite keeps beside {what},"
            return (
                f"{what} lies inside it, and outputs there could overwrite the store",
                "that does not hold OPENCODE_DB",
            )
    return None


class LedgerRoot(ConfigurableResource):
    """Where each round's outputs are written: `<root>/<round>/` (see rollout_assets.stages)."""

    root_dir: str

    @property
    def path(self) -> Path:
        return _absolute(self.root_dir)

    def outputs(self, round_key: str) -> RoundOutputs:
        """The output folder of a round; the key is validated, so it cannot point outside the root."""
        validate_round_key(round_key)
        return RoundOutputs(self.path / round_key)

    def check_apart_from_inputs(
        self, rounds_root: RoundsRoot, opencode: OpencodeDatabase, claude: ClaudeProjects
    ) -> None:
        """ConfigurationError unless outputs written under this root can never land among the
        inputs (see `_overlap_with_inputs`)."""
        overlap = _overlap_with_inputs(self.path, rounds_root, opencode, claude)
        if overlap is not None:
            problem, instead = overlap
            raise ConfigurationError(
                f"refusing ledger root {self.path}: {problem}; set ROLLOUT_LEDGER_ROOT to a folder {instead}"
            )

    def writable_outputs(self, round_key: str) -> RoundOutputs:
        outputs = self.outputs(round_key)
        try:
            (outputs.folder / "stages").mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigurationError(
                f"ledger root {self.path} is not writable ({error.strerror}): "
                "set ROLLOUT_LEDGER_ROOT to a folder this process may write"
            ) from error
        if not os.access(outputs.folder, os.W_OK):
            raise ConfigurationError(
                f"ledger root {self.path} is not writable: set ROLLOUT_LEDGER_ROOT to a folder this process may write"
            )
        return outputs


class RoundLocations(ConfigurableResource):
    """Every place the assets and checks of a round read or write: the rounds root, the opencode
    store and the Claude projects folder (inputs, never written) and the ledger root (outputs).

    Whether the ledger root is apart from the inputs is checked once, when a run sets the
    resource up; every stage that writes then refuses a ledger root that is not, so the step
    fails naming its round, while checks, which write nothing, still run. A round's own output
    folders are checked each time a stage asks for them: a symlink there could lead among the
    inputs even under a ledger root that is apart.

    The first stage of a run that asks to write a round's outputs takes the round's lock, and
    the run keeps it until Dagster tears the resource down as the run ends: the steps of a run
    share one resource under the project's in-process executor. (Under an executor with a
    process per step, each step holds it while it runs.) A second run of the round meanwhile
    fails its first writing stage with RoundBusyError, before writing anything.
    """

    rounds_root: RoundsRoot
    opencode: OpencodeDatabase
    claude: ClaudeProjects
    ledger_root: LedgerRoot

    _ledger_root_checked: bool = PrivateAttr(default=False)
    _ledger_root_refusal: str | None = PrivateAttr(default=None)
    _run_id: str | None = PrivateAttr(default=None)
    _round_locks: dict[str, RoundLock] = PrivateAttr(default_factory=dict)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._run_id = context.run.run_id if context.run is not None else None
        self._check_ledger_root_once()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        self.release_round_locks()

    def release_round_locks(self) -> None:
        """Release the locks of the rounds this resource wrote (at the end of the run)."""
        while self._round_locks:
            release_round_lock(self._round_locks.popitem()[1])

    def _check_ledger_root_once(self) -> None:
        # Also reached without a set-up (the resource used outside a run): never skipped.
        if self._ledger_root_checked:
            return
        try:
            self.ledger_root.check_apart_from_inputs(self.rounds_root, self.opencode, self.claude)
        except ConfigurationError as refusal:
            self._ledger_root_refusal = str(refusal)
        self._ledger_root_checked = True

    def check_ledger_root(self) -> None:
        """ConfigurationError when the ledger root is not apart from the inputs."""
        self._check_ledger_root_once()
        if self._ledger_root_refusal is not None:
            raise ConfigurationError(self._ledger_root_refusal)

    def round_dir(self, round_key: str) -> Path:
        """The outDir of round `round_key`, which must exist."""
        return self.rounds_root.round_dir(round_key)

    def outputs(self, round_key: str) -> RoundOutputs:
        """Where the outputs of round `round_key` are, to be read."""
        return self.ledger_root.outputs(round_key)

    def writable_outputs(self, round_key: str) -> RoundOutputs:
        """The output folder of round `round_key`, created only once the ledger root and the
        round's folders under it are known to be apart from every input. Each stage asks, since
        a run may select any one of them."""
        self.check_ledger_root()
        outputs = self.ledger_root.outputs(round_key)
        # The folders the stages write in (the round's, stages/, stages/built-from/, training/):
        # a symlink at any of them could lead among the inputs.
        for folder in (
            outputs.manifest.parent,
            outputs.campaign_cells.parent,
            outputs.built_from("round_manifest").parent,
            outputs.training,
        ):
            self.refuse_among_inputs(folder, f"the output folder {folder} of round {round_key}")
        writable = self.ledger_root.writable_outputs(round_key)
        self._hold_round_lock(round_key, writable)
        return writable

    def _hold_round_lock(self, round_key: str, outputs: RoundOutputs) -> None:
        """Take the round's lock unless this run holds it already (RoundBusyError when
        another run does)."""
        if round_key in self._round_locks:
            return
        holder = f"run {self._run_id}" if self._run_id else "a run"
        self._round_locks[round_key] = acquire_round_lock(
            outputs.folder, round_key, f"{holder} (process {os.getpid()})"
        )

    def refuse_among_inputs(self, folder: Path, what: str) -> None:
        """ConfigurationError when `folder` (symlinks followed) leads among the inputs."""
        overlap = _overlap_with_inputs(folder, self.rounds_root, self.opencode, self.claude)
        if overlap is not None:
            raise ConfigurationError(
                f"refusing {what}: symlinks followed, {overlap[0]}; replace the link with a folder of its own"
            )


class RoundDiscovery(ConfigurableResource):
    """How the sensor waits for a round to settle before materializing it, and how it retries a
    round whose run failed for a reason that may pass (see `rollout_assets.discovery`)."""

    quiet_period_seconds: int = 120
    max_retries: int = RetryPolicy.max_retries  # per round and fingerprint
    retry_backoff_seconds: int = RetryPolicy.backoff_seconds  # before the first retry, then doubled


def list_round_dirs(root: Path, log: Any) -> RoundDirs:
    """Valid round directories under the root by partition key; any other entry is logged (with
    `log.warning`) and skipped. A rounds root that cannot be listed is not logged: the caller says so."""
    try:
        names = sorted(os.listdir(root))
    except OSError as error:
        return RoundDirs(
            root_problem=f"rounds root {root} cannot be listed ({error.strerror}): set ROLLOUT_ROUNDS_ROOT"
        )
    rounds: dict[str, Path] = {}
    unreadable: set[str] = set()
    for name in names:
        path = root / name
        try:
            if not path.is_dir() or not is_round_dir(path):
                continue
        except OSError as error:  # unreadable entry, symlink loop, vanished mid-scan
            log.warning(f"skipping {path}: {error}")
            unreadable.add(name)
            continue
        problem = round_key_problem(name)
        if problem is not None:
            log.warning(f"skipping {path}: {problem}")
            continue
        rounds[name] = path
    return RoundDirs(rounds, frozenset(unreadable))
