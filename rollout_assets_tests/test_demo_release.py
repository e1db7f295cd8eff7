"""The demo's planted secrets (the `planted_secrets` case, rollout_assets/demo/leaks.py) and the
release of the demo's ledgers, built by the command `bash scripts/demo.sh` runs.

Each secret is where planted.py says, in the ledger of each round that plants cases, and in the
training rows a release is made of; the release holds none of them in any file, its scrub report
counts every planted kind, and its scan passes. The same checks fail on a release whose scrubber
was bypassed or left one kind alone, so they can fail.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from rollout_assets.demo import DEFAULT_ROUNDS, RoundSpec, edge_case_sites
from rollout_assets.demo.leaks import PlantedSecret, round_leaks
from rollout_assets.release import ReleaseConfig, RoundInput, build_release
from rollout_assets.release.release import ReleaseCheckFailed
from rollout_assets.release.scrub import Scrubber
from rollout_assets.release.verify import check_no_secrets
from rollout_assets.training import export_training
from rollout_assets_tests.dataset_ledgers import cli
from rollout_assets_tests.inspect_ledgers import demo_ledgers
from rollout_assets_tests.test_golden import GOLDEN_SPEC

ROUND_001, ROUND_002, ROUND_003 = DEFAULT_ROUNDS
PLANTING = (ROUND_001, ROUND_003)  # the rounds that plant edge cases
SECRETS: tuple[PlantedSecret, ...] = tuple(s for spec in PLANTING for s in round_leaks(spec).secrets)
KINDS = sorted({secret.kind for secret in SECRETS})


@dataclass(frozen=True)
class Demo:
    root: Path  # the demo's root (rounds, opencode.db, claude-projects)
    ledger_root: Path  # <round>/rollout-ledger.jsonl, as scripts/demo.sh's materialize writes them
    training: list[RoundInput]  # each round's training rows, exported here


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    folder = tmp_path_factory.mktemp("demo-release")
    ledgers = demo_ledgers(folder)
    training = [
        RoundInput(key, ledger, export_training(ledger, folder / "training" / key, key).files)
        for key, ledger in sorted(ledgers.items())
    ]
    return Demo((folder / "demo").resolve(), folder / "ledgers", training)


@pytest.fixture(scope="module")
def release(demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's release, made as scripts/demo.sh makes it."""
    out = tmp_path_factory.mktemp("releases")
    result = cli("release", demo.ledger_root, out, "--license", "cc-by-4.0", "--name", "demo-dataset")
    assert result.returncode == 0, result.stderr
    assert "scrubbed: " in result.stdout and "scrubbed: nothing" not in result.stdout
    return out / "demo-dataset"


def _forms(value: str) -> tuple[str, ...]:
    """A value as written, and JSON-escaped once and twice (inside tool-call arguments)."""
    return value, json.dumps(value)[1:-1], json.dumps(json.dumps(value))[1:-1]


def _holds(text: str, secret: PlantedSecret) -> bool:
    return any(form in text for form in _forms(secret.value))


def _rows_text(paths: list[Path]) -> str:
    return "".join(json.dumps(pq.read_table(path).to_pylist(), ensure_ascii=False) for path in paths)


def release_problems(release: Path) -> list[str]:
    """What shows the release keeps a planted secret: a value in any of its files, a planted
    kind its scrub report does not count, a finding of its scan."""
    files = sorted(path for path in release.rglob("*") if path.is_file())
    text = _rows_text([p for p in files if p.suffix == ".parquet"])
    text += "".join(p.read_text(encoding="utf-8") for p in files if p.suffix != ".parquet")
    problems = [f"a {s.kind} value of the {s.carrier} is in the release" for s in SECRETS if _holds(text, s)]
    counted = json.loads((release / "scrub-report.json").read_text(encoding="utf-8"))["replacements"]
    problems += [f"the scrub report counts no {kind}" for kind in KINDS if counted.get(kind, 0) < 1]
    return problems + [f"scan: {problem}" for problem in check_no_secrets(release).problems]


def _first_tool_part(db_path: Path, cwd: str) -> dict[str, Any]:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        (session_id,) = db.execute(
            "SELECT id FROM session WHERE directory = ? AND parent_id IS NULL", (cwd,)
        ).fetchone()
        parts = [json.loads(row[0]) for row in db.execute("SELECT data FROM part WHERE session_id = ? ORDER BY id",
                                                          (session_id,))]  # fmt: skip
    finally:
        db.close()
    return next(part for part in parts if part["type"] == "tool")


# --- Planted where documented, in the ledgers and the training rows -------------------------


def test_the_secrets_are_drawn_from_the_round_and_are_of_six_kinds_or_more() -> None:
    assert round_leaks(ROUND_001) == round_leaks(RoundSpec(name="round-001", seed=1))
    first, third = ({s.value for s in round_leaks(spec).secrets} for spec in PLANTING)
    assert not first & third  # another round, other values
    assert len(KINDS) >= 6 and len({s.value for s in SECRETS}) == len(SECRETS)


@pytest.mark.parametrize("spec", PLANTING, ids=lambda spec: spec.name)
def test_each_secret_is_where_planted_py_says(demo: Demo, spec: RoundSpec) -> None:
    site = edge_case_sites(demo.root, spec)["planted_secrets"]
    leaks = round_leaks(spec)
    worker = _first_tool_part(demo.root / "opencode.db", site.worker_cwd)
    assert worker["tool"] == "bash"
    proposer = site.transcript_path.read_text(encoding="utf-8")
    carried = {
        "worker bash input": json.dumps(worker["state"]["input"]),
        "worker bash output": worker["state"]["output"],
        "proposer Read output": proposer,
        "proposer Bash input": proposer,
    }
    for secret in leaks.secrets:
        assert _holds(carried[secret.carrier], secret), secret
    assert site.cell_dir.is_dir() and site.receipt_path.is_file()


@pytest.mark.parametrize("spec", PLANTING, ids=lambda spec: spec.name)
def test_the_ledger_of_a_planting_round_holds_every_secret(demo: Demo, spec: RoundSpec) -> None:
    ledger = (demo.ledger_root / spec.name / "rollout-ledger.jsonl").read_text(encoding="utf-8")
    missing = [secret for secret in round_leaks(spec).secrets if not _holds(ledger, secret)]
    assert not missing


def test_the_clean_rounds_plant_no_secret(demo: Demo, tmp_path: Path) -> None:
    for spec in (ROUND_002, GOLDEN_SPEC):
        assert "planted_secrets" not in edge_case_sites(tmp_path, spec)
    ledger = (demo.ledger_root / ROUND_002.name / "rollout-ledger.jsonl").read_text(encoding="utf-8")
    assert not [secret for secret in SECRETS if _holds(ledger, secret)]


def test_every_kind_reaches_the_rows_a_release_is_made_of(demo: Demo) -> None:
    """Else the release's scrubbing of that kind would go untested."""
    rows = _rows_text([round_input.training.parquet(name) for round_input in demo.training
                       for name in ("sft_rows", "preference_pairs", "grpo_groups")])  # fmt: skip
    assert sorted({secret.kind for secret in SECRETS if _holds(rows, secret)}) == KINDS


# --- The release of the demo ------------------------------------------------------------------


def test_the_demo_release_scrubs_every_planted_secret(release: Path) -> None:
    assert release_problems(release) == []
    report = json.loads((release / "scrub-report.json").read_text(encoding="utf-8"))
    manifest = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
    assert report["replacements"] == manifest["scrubbed"] and report["allowed"] == {}


def _config() -> ReleaseConfig:
    return ReleaseConfig(license="cc-by-4.0", name="demo-dataset")


def test_a_release_not_scrubbed_fails_every_check(
    demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Scrubber, "scrub_value", lambda self, value: value)
    with pytest.raises(ReleaseCheckFailed, match="release_has_no_secrets"):
        build_release(demo.training, tmp_path / "checked", _config(), verify=True)
    build_release(demo.training, tmp_path / "unchecked", _config())
    problems = release_problems(tmp_path / "unchecked")
    for kind in KINDS:
        assert f"the scrub report counts no {kind}" in problems
        assert any(problem.startswith(f"a {kind} value of the ") for problem in problems), kind
    assert any(problem.startswith("scan: ") for problem in problems)


@pytest.mark.parametrize("kind", ["private-key", "stripe-key"])
def test_a_kind_the_scrubber_leaves_alone_is_caught(
    kind: str, demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scrubber, and so the scan that uses it, passes over one kind: the values and the
    scrub report show it."""
    search = Scrubber._search

    def search_but(self: Scrubber, text: str) -> Any:
        secrets, kept = search(self, text)
        return [secret for secret in secrets if secret.kind != kind], kept

    monkeypatch.setattr(Scrubber, "_search", search_but)
    build_release(demo.training, tmp_path / "release", _config())
    problems = release_problems(tmp_path / "release")
    assert f"the scrub report counts no {kind}" in problems
    assert any(problem.startswith(f"a {kind} value of the ") for problem in problems), problems
    assert not any(
        f"counts no {other}" in problem for other in KINDS if other != kind for problem in problems
    )
