"""Resources: where rounds, harness stores and ledgers live.

Each is a `ConfigurableResource` bound in `rollout_assets.definitions` from an environment
variable with a local default:

| resource        | variable              | default                                  |
|-----------------|-----------------------|------------------------------------------|
| rounds_root     | ROLLOUT_ROUNDS_ROOT   | ./rounds                                 |
| opencode_db     | OPENCODE_DB           | ~/.local/share/opencode/opencode.db      |
| claude_projects | CLAUDE_PROJECTS_DIR   | ~/.claude/projects                       |
| ledger_root     | ROLLOUT_LEDGER_ROOT   | ./ledgers                                |

Misconfiguration gives one sentence that says what to set. The inputs are read-only, so a
ledger root that overlaps the rounds root or the Claude projects folder, or that holds the
opencode store, is refused before anything is written (`LedgerRoot.check_apart_from_inputs`).
"""

from __future__ import annotations

from rollout_assets.errors import RoundError
import os
import re
from pathlib import Path

from dagster import ConfigurableResource

from rollout_assets.defs.partitions import validate_round_key
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
        inputs: the root must neither be, hold nor lie inside the rounds root or the Claude
        projects folder, and must not hold the opencode store or the files SQLite keeps beside
        it (a round's ledger path could be the store). Symlinks are followed, as the writes would."""
        for folder, name, variable in (
            (rounds_root.path, "rounds root", "ROLLOUT_ROUNDS_ROOT"),
            (claude.path, "Claude projects folder", "CLAUDE_PROJECTS_DIR"),
        ):
            relation = folder_relation(self.path, folder)
            if relation is not None:
                raise ConfigurationError(
                    f"refusing ledger root {self.path}: it {relation} the {name} {folder}, and inputs are never "
                    f"written; set ROLLOUT_LEDGER_ROOT to a folder apart from {variable}"
                )
        store = opencode.db_path
        for store_file in sqlite_files(store):
            if is_inside(store_file, self.path):
                what = f"the opencode database {store}"
                if store_file != real_path(store):
                    what = f"{store_file}, a file SQLite keeps beside {what},"
                raise ConfigurationError(
                    f"refusing ledger root {self.path}: {what} lies inside it, and outputs there could overwrite "
                    "the store; set ROLLOUT_LEDGER_ROOT to a folder that does not hold OPENCODE_DB"
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
