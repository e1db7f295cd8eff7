"""`rollout-assets export` and `rollout-assets release`, run as the command a user types."""

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from rollout_assets.ledger import write_ledger
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout_assets.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


def _ledger_root(tmp_path: Path, secret: str = "") -> Path:
    root = tmp_path / "ledgers"
    for number in (1, 2):
        lines = [sample_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"s{number}")))]
        for index in range(6):
            line = sample_worker_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"w{number}-{index}")))
            line["task"]["instance_id"] = f"org__repo-{number}{index}"
            line["messages"][-1]["content"] = f"Done {number}-{index} {secret}"
            lines.append(line)
        ledger = root / f"round-00{number}" / "rollout-ledger.jsonl"
        ledger.parent.mkdir(parents=True)
        write_ledger(ledger, lines)
    return root


def test_export_writes_the_rows_and_runs_the_checks(tmp_path: Path) -> None:
    root = _ledger_root(tmp_path)
    result = _cli("export", root / "round-001" / "rollout-ledger.jsonl", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "sft_rows: 6 rows from 6 of 7 lines (dropped: gap 1)"
    assert pq.ParquetFile(tmp_path / "out" / "sft.parquet").metadata.num_rows == 6
    report = json.loads((tmp_path / "out" / "training-report.json").read_text())
    assert report["round"] == "round-001"


def test_export_of_a_corrupt_ledger_is_one_line(tmp_path: Path) -> None:
    ledger = tmp_path / "rollout-ledger.jsonl"
    ledger.write_text("{\n")
    result = _cli("export", ledger, tmp_path / "out")
    assert result.returncode == 1
    assert result.stderr.startswith(f"rollout-assets: error: {ledger}:1: invalid JSON: ")
    assert len(result.stderr.splitlines()) == 1


def test_release_of_every_round(tmp_path: Path) -> None:
    result = _cli("release", _ledger_root(tmp_path, "key ghp_R8s7T6u5V4w3X2y1Z0a9B8c7D6e5F4g3H2i1"),
                  tmp_path / "releases", "--license", "cc-by-4.0", "--name", "demo")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "github-token 12" in result.stdout
    manifest = json.loads((tmp_path / "releases" / "demo" / "manifest.json").read_text())
    assert [entry["round"] for entry in manifest["rounds"]] == ["round-001", "round-002"]
    assert sum(manifest["rows"]["sft"].values()) == 12


def test_release_without_a_license_exits_2(tmp_path: Path) -> None:
    result = _cli("release", _ledger_root(tmp_path), tmp_path / "releases")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("rollout-assets: error: a release needs a license")
    assert not (tmp_path / "releases").exists()


def test_a_release_with_a_secret_left_is_not_written(tmp_path: Path) -> None:
    # The scrubber sees the rows; a round's folder name reaches the card and the manifest as it
    # is, and a token there is found by the scan, which refuses the release.
    root = _ledger_root(tmp_path)
    (root / "round-002").rename(root / "round-ghp_R8s7T6u5V4w3X2y1Z0a9B8c7D6e5F4g3H2i1")
    result = _cli("release", root, tmp_path / "releases", "--license", "mit")
    assert result.returncode == 1
    assert "release_has_no_secrets" in result.stderr and "README.md: line" in result.stderr
    assert "github-token (sha1:" in result.stderr
    assert not (tmp_path / "releases" / "rollout-dataset").exists()


def test_an_allowlisted_finding_lets_the_release_through(tmp_path: Path) -> None:
    root = _ledger_root(tmp_path)
    (root / "round-002").rename(root / "round-ghp_R8s7T6u5V4w3X2y1Z0a9B8c7D6e5F4g3H2i1")
    refused = _cli("release", root, tmp_path / "releases", "--license", "mit")
    # Each value once: the token (in the card), and with it the quoted name (in the manifest).
    hashes = sorted(set(re.findall(r"sha1:[0-9a-f]{40}", refused.stderr)))
    assert len(hashes) == 2
    allow = tmp_path / "allow.txt"
    allow.write_text("# the round's name, checked: a test token\n" + "\n".join(hashes) + "\n")
    result = _cli("release", root, tmp_path / "releases", "--license", "mit", "--allow", allow)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "releases" / "rollout-dataset" / "scrub-report.json").read_text())
    assert sorted(report["allowed"]) == sorted(hashes)
    bad = tmp_path / "bad-allow.txt"
    bad.write_text("not a hash\n")
    result = _cli("release", root, tmp_path / "releases", "--license", "mit", "--allow", bad)
    assert result.returncode == 1 and f"{bad}:1: 'not a hash' is not a finding's hash" in result.stderr


def test_release_of_a_round_that_is_not_there(tmp_path: Path) -> None:
    result = _cli("release", _ledger_root(tmp_path), tmp_path / "r", "--license", "mit", "--round", "round-009")
    assert result.returncode == 1
    assert "round round-009:" in result.stderr and "does not exist" in result.stderr
