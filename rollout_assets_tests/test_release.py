"""A release across rounds: scrubbed, split by instance, scanned, carded; real files throughout."""

import json
import random
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_assets.ledger import write_ledger
from rollout_assets.release import ReleaseConfig, ReleaseError, RoundInput, build_release
from rollout_assets.release.scrub import Scrubber, value_hash
from rollout_assets.release.verify import (
    check_card_matches_files,
    check_no_secrets,
    check_rows_are_distinct,
    check_split_overlap,
)
from rollout_assets.training import export_training
from rollout_assets_tests.ledger_samples import sample_worker_line
from rollout_assets_tests.secret_shapes import FAMILIES

# One planted value per kind of token, and the rule that must count it.
PLANTED = {
    "anthropic-key": "sk-ant-api03-Qw8rT5yU1iO3pA6sD9fG2hJ4kL7zX0cV",
    "openai-key": "sk-proj-Zx9Cv8Bn7Mq6Lw5Ke4Jr3Ht2Gy1Fu0DiT3BlbkFJ",
    "github-token": "ghp_R8s7T6u5V4w3X2y1Z0a9B8c7D6e5F4g3H2i1",
    "huggingface-token": "hf_QwErTyUiOpAsDfGhJkLzXcVbNmQwErTy",
    "slack-token": "xoxb-2048-4096-q1W2e3R4t5Y6u7I8o9P0",
    "aws-access-key-id": "AKIAZ7Q3R5T7V9X1B3D5",
    "stripe-key": "sk_live_51Hq2w3e4r5t6y7u8i9o0p",
    "google-api-key": "AIzaSyB3x9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ24",
}
PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----"
# Every value of every family planted in the rounds below: none may reach a release file.
PLANTED_FAMILY_VALUES: list[str] = []


def _family_texts(name: str) -> list[str]:
    """One text of each secret family (secret_shapes.py), with values fresh for this line."""
    texts = []
    for family, make in sorted(FAMILIES.items()):
        text, values = make(random.Random(f"{name}-{family}"))
        texts.append(text)
        PLANTED_FAMILY_VALUES.extend(values)
    return texts


def _line(name: str, instance: str, reward: float, planted: str = "") -> dict[str, Any]:
    line = sample_worker_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)))
    line["task"]["instance_id"] = instance
    line["outcome"]["reward"] = reward
    line["messages"][-1]["content"] = f"Done ({name})."
    if planted:
        families = _family_texts(name)
        messages = line["messages"]
        # User text, tool-call arguments, tool output, assistant text and metadata each carry some.
        messages[0]["content"] += f"\nexport GITHUB_TOKEN={PLANTED['github-token']}\nmail alice@corp.example\n" + families[0]
        call = messages[1]["tool_calls"][0]["function"]
        call["arguments"] = json.dumps(
            {"command": f"curl -H 'Authorization: Bearer {planted}' https://api && cat <<EOF\n{families[1]}EOF"}
        )
        messages[2]["content"] = (
            f"{PEM}\nAWS_SECRET_ACCESS_KEY={planted}\n-rw-r--r-- 1 alice staff 10 Jan 1 x\n"
            f"/home/alice/repo -home-alice-repo on build-3.corp.example {' '.join(PLANTED.values())}\n"
            "origin https://x-access-token:ghs_" + planted.ljust(36, "Q") + "@github.com/org/repo.git (fetch)\n"
            + "".join(families[2:])
        )
        messages[3]["content"] += f" ({PLANTED['openai-key']}) cwd /Users/alice"
        line["policy"]["model"] = "model-of-alice@corp.example"
    return line


def _round(root: Path, key: str, lines: list[dict[str, Any]]) -> RoundInput:
    ledger = root / key / "rollout-ledger.jsonl"
    ledger.parent.mkdir(parents=True)
    write_ledger(ledger, lines)
    (ledger.parent / "rollout-stats.json").write_text(json.dumps({"costUsdByRole": {"worker": {"usd": 1.5}}}))
    files = export_training(ledger, ledger.parent / "training", key).files
    return RoundInput(key, ledger, files)


@pytest.fixture
def rounds(tmp_path: Path) -> list[RoundInput]:
    first = [_line(f"r1-{i}", f"org__repo{i % 7}-{i}", 1.0, planted=f"tok{i}Secret{i}x9Q") for i in range(20)]
    second = [_line(f"r2-{i}", f"org__repo{i % 7}-{i + 40}", 0.5) for i in range(20)]
    second.append(first[0])  # the same line in two rounds: written once
    return [_round(tmp_path / "ledgers", "round-001", first), _round(tmp_path / "ledgers", "round-002", second)]


def _data_file(release: Path, kind: str, split: str) -> Path:
    """The one data file of a kind and split (its name ends in a digest of its content)."""
    (path,) = (release / "data" / kind).glob(f"{split}-*.parquet")
    return path


def _config(**values: Any) -> ReleaseConfig:
    settings: dict[str, Any] = {"host_names": ("build-3.corp.example",), "test_fraction": 0.3, **values}
    return ReleaseConfig(license="cc-by-4.0", **settings)


def test_a_release_passes_its_checks(rounds: list[RoundInput], tmp_path: Path) -> None:
    release = tmp_path / "releases" / "demo"
    manifest = build_release(rounds, release, _config())
    for check in (check_split_overlap, check_no_secrets, check_card_matches_files, check_rows_are_distinct):
        verdict = check(release)
        assert verdict.passed, (check.__name__, verdict.problems)
    assert manifest["duplicates_skipped"]["sft"] == 1
    assert sum(manifest["rows"]["sft"].values()) == 40
    assert manifest["rows"]["sft"]["test"] > 0 and manifest["rows"]["sft"]["train"] > 0


def test_every_planted_secret_is_gone_and_counted(rounds: list[RoundInput], tmp_path: Path) -> None:
    release = tmp_path / "releases" / "demo"
    manifest = build_release(rounds, release, _config())
    text = "".join(
        json.dumps(pq.read_table(path).to_pylist()) for path in sorted(release.rglob("*.parquet"))
    ) + "".join((release / name).read_text() for name in ("README.md", "manifest.json", "scrub-report.json"))
    planted = [*PLANTED.values(), "BEGIN OPENSSH", "alice", "build-3.corp.example", "tok1Secret1x"]
    assert len(PLANTED_FAMILY_VALUES) > 20 * len(FAMILIES)
    for value in planted + PLANTED_FAMILY_VALUES:
        for form in (value, json.dumps(value)[1:-1], json.dumps(json.dumps(value))[1:-1]):
            assert form not in text, value
    scrubbed = manifest["scrubbed"]
    for rule in [*PLANTED, "private-key", "authorization", "secret-assignment", "url-credentials", "password-flag",
                 "azure-key", "discord-webhook", "vault-token", "base64-encoded-secret", "ls-owner", "email",
                 "home-path", "home-path-dashed", "host-name"]:
        assert scrubbed.get(rule, 0) >= 20, rule  # 20 planted rows, each with one or more of each
    report = json.loads((release / "scrub-report.json").read_text())
    assert report["replacements"] == scrubbed and report["allowed"] == {}
    assert check_no_secrets(release).passed


def test_scrubbing_is_idempotent_and_keeps_the_kind() -> None:
    scrubber = Scrubber()
    once = scrubber.scrub(f"GH={PLANTED['github-token']} at /home/bob")
    assert once == "GH=<REDACTED_GITHUB_TOKEN> at /home/<USER>"
    assert Scrubber().scrub(once) == once


def test_a_secret_the_scrubber_misses_fails_the_scan(rounds: list[RoundInput], tmp_path: Path) -> None:
    release = tmp_path / "releases" / "demo"
    build_release(rounds, release, _config())
    path = _data_file(release, "sft", "train")
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[1]["messages"][0]["content"] += " SG.abcdefghijklmnopqrstuv.wxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abc"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    verdict = check_no_secrets(release)
    assert not verdict.passed
    assert verdict.problems[0].startswith(
        f"{path.relative_to(release)}: row 2, messages[0].content: sendgrid-key (sha1:"
    )


def test_an_instance_in_both_splits_fails_the_overlap_check(rounds: list[RoundInput], tmp_path: Path) -> None:
    release = tmp_path / "releases" / "demo"
    build_release(rounds, release, _config())
    test_file = _data_file(release, "sft", "test")
    train_rows = pq.read_table(_data_file(release, "sft", "train")).to_pylist()
    table = pq.read_table(test_file)
    rows = table.to_pylist()
    rows[0]["metadata"]["instance_id"] = train_rows[0]["metadata"]["instance_id"]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), test_file)
    verdict = check_split_overlap(release)
    assert not verdict.passed and train_rows[0]["metadata"]["instance_id"] in verdict.problems[0]


def test_repository_splits_keep_a_repository_together(rounds: list[RoundInput], tmp_path: Path) -> None:
    release = tmp_path / "releases" / "demo"
    build_release(rounds, release, _config(split_unit="repository"))
    assert check_split_overlap(release).passed
    repos = {
        split: {row["metadata"]["instance_id"].rsplit("-", 1)[0]
                for row in pq.read_table(_data_file(release, "sft", split)).to_pylist()}
        for split in ("train", "test")
    }
    assert not repos["train"] & repos["test"]


def test_the_card_is_checked_against_the_files(rounds: list[RoundInput], tmp_path: Path) -> None:
    release = tmp_path / "releases" / "demo"
    build_release(rounds, release, _config())
    card = release / "README.md"
    card.write_text(card.read_text().replace("| sft | train |", "| sft | train | 1 |<!--", 1))
    assert not check_card_matches_files(release).passed
    build_release(rounds, release, _config())
    train = _data_file(release, "sft", "train")
    shutil.copy(_data_file(release, "sft", "test"), train)
    verdict = check_card_matches_files(release)
    assert not verdict.passed and train.name in verdict.problems[0]


def test_the_same_inputs_give_the_same_bytes(rounds: list[RoundInput], tmp_path: Path) -> None:
    one, two = tmp_path / "one" / "r", tmp_path / "two" / "r"
    build_release(rounds, one, _config())
    build_release(list(reversed(rounds)), two, _config())
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    for name in files:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_no_release_without_a_license() -> None:
    with pytest.raises(ReleaseError, match="needs a license"):
        ReleaseConfig(license="")


def test_a_failed_build_keeps_the_earlier_release(rounds: list[RoundInput], tmp_path: Path) -> None:
    release = tmp_path / "releases" / "demo"
    build_release(rounds, release, _config())
    before = (release / "manifest.json").read_bytes()
    rounds[1].training.parquet("grpo_groups").unlink()
    with pytest.raises(ReleaseError, match="build its training rows first"):
        build_release(rounds, release, _config())
    assert (release / "manifest.json").read_bytes() == before
    assert [p.name for p in release.parent.iterdir()] == ["demo"]


def test_the_release_loads_with_datasets(rounds: list[RoundInput], tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    release = tmp_path / "releases" / "demo"
    build_release(rounds, release, _config())
    loaded = datasets.load_dataset(str(release), "sft")
    assert set(loaded) == {"train", "test"}
    assert loaded["train"].num_rows + loaded["test"].num_rows == 40


def test_an_allowlisted_value_is_kept_and_passes_the_scan(tmp_path: Path) -> None:
    digest = "9c1185a5c5e9fc54612808977ee8f548b2258d31"
    line = _line("fixture", "org__repo-1", 1.0)
    line["messages"][2]["content"] = f'assert sha1(data) == "{digest}"'
    rounds = [_round(tmp_path / "ledgers", "round-001", [line])]
    release = tmp_path / "releases" / "demo"
    build_release(rounds, release, _config(test_fraction=0.0))
    rows_text = json.dumps(pq.read_table(next(release.rglob("data/sft/train-*.parquet"))).to_pylist())
    assert digest not in rows_text and "<REDACTED_HEX_HIGH_ENTROPY_STRING>" in rows_text

    allowed = value_hash(digest)
    build_release(rounds, release, _config(test_fraction=0.0, allowed=frozenset({allowed})))
    rows_text = json.dumps(pq.read_table(next(release.rglob("data/sft/train-*.parquet"))).to_pylist())
    assert digest in rows_text
    report = json.loads((release / "scrub-report.json").read_text())
    assert report["allowed"] == {allowed: 1}
    assert check_no_secrets(release).passed
    # The scan takes the allowlist from the release's own report: without it, the value is a finding.
    report["allowed"] = {}
    (release / "scrub-report.json").write_text(json.dumps(report))
    verdict = check_no_secrets(release)
    assert not verdict.passed and f"hex-high-entropy-string ({allowed})" in verdict.problems[0]


def test_a_card_wrong_with_its_manifest_fails_the_card_check(
    rounds: list[RoundInput], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A card that states the train rows for test too, written by the code that writes the card:
    # card and manifest are self-consistent, only the files disagree.
    import rollout_assets.release.card as card_module

    def train_for_both(manifest: dict[str, Any]) -> list[str]:
        lines = ["| kind | split | rows |", "|---|---|---|"]
        for kind in manifest["rows"]:
            lines += [f"| {kind} | {split} | {manifest['rows'][kind]['train']} |" for split in ("train", "test")]
        return lines

    monkeypatch.setattr(card_module, "rows_table", train_for_both)
    release = tmp_path / "releases" / "demo"
    manifest = build_release(rounds, release, _config())
    verdict = check_card_matches_files(release)
    assert not verdict.passed
    sft = manifest["rows"]["sft"]
    assert f"README.md states {sft['train']} sft rows in test, the files hold {sft['test']}" in verdict.problems


@pytest.mark.parametrize(
    "edit",
    [
        ("instances in train", lambda text: re.sub(r"(\d+) instances in train", lambda m: f"{int(m[1]) + 1} instances in train", text)),
        ("SFT tokens", lambda text: re.sub(r"\(estimated\): (\d+)", lambda m: f"(estimated): {int(m[1]) - 7}", text)),
        ("sft rows", lambda text: re.sub(r"^\| sft \| test \| (\d+) \|$", lambda m: f"| sft | test | {int(m[1]) * 2 + 1} |", text, flags=re.M)),
    ],
    ids=lambda edit: edit[0],
)
def test_a_card_whose_numbers_are_edited_fails(rounds: list[RoundInput], tmp_path: Path, edit: Any) -> None:
    release = tmp_path / "releases" / "demo"
    build_release(rounds, release, _config())
    assert check_card_matches_files(release).passed
    card = release / "README.md"
    edited = edit[1](card.read_text())
    assert edited != card.read_text()
    card.write_text(edited)
    verdict = check_card_matches_files(release)
    assert not verdict.passed and any(edit[0].split()[0] in problem for problem in verdict.problems), verdict.problems


def test_duplicates_written_twice_fail_the_distinct_check(
    rounds: list[RoundInput], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The build's duplicate test broken (every row looks new): the same row of two rounds is
    # written twice, and the card and manifest count both, consistently.
    import itertools

    import rollout_assets.release.build as build_module

    numbers = itertools.count()
    monkeypatch.setattr(build_module, "_content_digest", lambda row: str(next(numbers)).encode())
    release = tmp_path / "releases" / "demo"
    manifest = build_release(rounds, release, _config())
    assert manifest["duplicates_skipped"]["sft"] == 0
    assert check_card_matches_files(release).passed
    verdict = check_rows_are_distinct(release)
    assert not verdict.passed and verdict.counts["duplicates"] >= 1
    assert "is data/sft/" in verdict.problems[0] and "again (the same content, other metadata)" in verdict.problems[0]
    monkeypatch.undo()
    build_release(rounds, release, _config())
    assert check_rows_are_distinct(release).passed
