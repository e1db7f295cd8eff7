"""The files of `rollout-assets release`: what it may replace (only an earlier release, never
among the ledgers), its config's types, its bad inputs in one sentence, and a release that
`datasets.load_dataset` loads, config by config, rebuilt in place without a stale cache."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollout_assets.ledger.io import write_lock
from rollout_assets.release import ReleaseConfig, ReleaseError, load_config_file
from rollout_assets.release.target import RELEASE_FORMAT
from rollout_assets_tests.dataset_ledgers import cli, tree, write_round
from rollout_assets_tests.unprivileged import DROP_TO_NOBODY, run_unprivileged


def _root(tmp_path: Path, tag: str = "", pairs: int = 3) -> Path:
    """A ledger root of two rounds, with SFT rows, preference pairs and GRPO groups."""
    root = tmp_path / "ledgers"
    for key in ("round-001", "round-002"):
        write_round(root, key, tag=f"{key}{tag}", pairs=pairs)
    return root


def _release(root: Path, out: Path | str, *args: object, **kwargs: Any) -> Any:
    return cli("release", root, out, "--license", "mit", *args, **kwargs)


# --- Only an earlier release is replaced ---------------------------------------------------


def test_an_earlier_release_is_replaced(tmp_path: Path) -> None:
    root, out = _root(tmp_path), tmp_path / "releases"
    assert _release(root, out, "--name", "demo").returncode == 0
    manifest = json.loads((out / "demo" / "manifest.json").read_text())
    assert manifest["format"] == RELEASE_FORMAT

    again = _release(root, out, "--name", "demo")

    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(out)) == ["demo"]


def _not_a_release(place: Path, kind: str) -> None:
    if kind == "a file":
        place.write_text("mine")
    elif kind == "a symlink":
        (place.parent / "elsewhere").mkdir()
        (place.parent / "elsewhere" / "keep.txt").write_text("mine")
        place.symlink_to(place.parent / "elsewhere")
    else:
        place.mkdir()
        (place / "keep.txt").write_text("mine")
        manifest = {
            "a folder that is not a release": None,
            "a folder whose manifest.json is another program's": '{"name": "x", "files": {}}',
            "a folder whose manifest.json is not JSON": "{",
        }[kind]
        if manifest is not None:
            (place / "manifest.json").write_text(manifest)


@pytest.mark.parametrize(
    "kind",
    [
        "a file",
        "a symlink",
        "a folder that is not a release",
        "a folder whose manifest.json is another program's",
        "a folder whose manifest.json is not JSON",
        "a folder whose manifest.json is a FIFO",
    ],
)
def test_anything_but_an_earlier_release_is_refused_and_kept(kind: str, tmp_path: Path) -> None:
    root, out = _root(tmp_path), tmp_path / "releases"
    out.mkdir()
    place = out / "demo"
    if kind.endswith("a FIFO"):
        place.mkdir()
        os.mkfifo(place / "manifest.json")
    else:
        _not_a_release(place, kind)
    before = sorted(os.listdir(out)), tree(out)
    said = "a file" if kind == "a file" else "a symlink" if kind == "a symlink" else (
        f"a folder that is not a release (no manifest.json of format {RELEASE_FORMAT})")  # fmt: skip

    result = _release(root, out, "--name", "demo", timeout=60)

    assert (result.returncode, result.stderr) == (1, f"rollout-assets: error: refusing to replace {place}: it is "
        f"{said}, and a release replaces only an earlier release; choose another --name or OUT_DIR\n")  # fmt: skip
    assert (sorted(os.listdir(out)), tree(out)) == before  # nothing renamed, nothing left behind


@pytest.mark.parametrize(
    ("out_dir", "name", "why"),
    [
        ("{root}", "round-001", "it is the folder of round round-001 ({root}/round-001)"),
        ("{root}/round-001", "rollout-dataset", "it lies inside the folder of round round-001 ({root}/round-001)"),
        ("{link}", "round-002", "it is the folder of round round-002 ({root}/round-002)"),
        ("{root}", "new-name", "it lies inside the ledger root {root}, where only {root}/releases/<name> may hold"),
        ("{tmp}", "ledgers", "it is the ledger root {root}, where only {root}/releases/<name> may hold"),
        ("{root}", "releases", "it lies inside the ledger root {root}, where only {root}/releases/<name> may hold"),
    ],
)
def test_a_release_among_the_ledgers_is_refused(out_dir: str, name: str, why: str, tmp_path: Path) -> None:
    root = _root(tmp_path)
    (tmp_path / "link").symlink_to(root)  # the same ledger root, by another name
    places = {"root": root, "link": tmp_path / "link", "tmp": tmp_path}
    before = tree(root)

    result = _release(root, out_dir.format(**places), "--name", name)

    assert result.returncode == 1
    assert result.stderr.startswith("rollout-assets: error: refusing to write the release ")
    assert why.format(**places) in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert tree(root) == before
    assert sorted(os.listdir(tmp_path)) == ["ledgers", "link"]


def test_a_release_under_the_ledger_roots_releases_folder_is_written(tmp_path: Path) -> None:
    root = _root(tmp_path)

    result = _release(root, root / "releases", "--name", "demo")

    assert result.returncode == 0, result.stderr
    assert (root / "releases" / "demo" / "manifest.json").is_file()


def test_a_second_release_of_one_folder_fails_at_once(tmp_path: Path) -> None:
    root, out = _root(tmp_path), tmp_path / "releases"
    out.mkdir()

    with write_lock(out / "demo"):  # the lock a running release holds
        result = _release(root, out, "--name", "demo")

    assert (result.returncode, result.stderr) == (1, f"rollout-assets: error: {out / 'demo'} is being written by "
        f"another process right now (lock {out / '.demo.lock'}); not writing it twice at once\n")  # fmt: skip
    assert os.listdir(out) == []


# --- Bad inputs: one sentence ------------------------------------------------------------


def test_a_fifo_as_a_rounds_ledger_is_refused_without_waiting(tmp_path: Path) -> None:
    root = _root(tmp_path)
    fifo = root / "round-003" / "rollout-ledger.jsonl"
    fifo.parent.mkdir()
    os.mkfifo(fifo)

    result = _release(root, tmp_path / "releases", timeout=60)

    assert (result.returncode, result.stderr) == (1, f"rollout-assets: error: {fifo}: not a ledger file (it is not a "
        "regular file); give a regular file\n")  # fmt: skip
    assert not (tmp_path / "releases").exists()


def test_a_round_name_that_is_a_path_is_refused(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (tmp_path / "other" / "round-009").mkdir(parents=True)

    result = _release(root, tmp_path / "releases", "--round", "round-001", "--round", "../other")

    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("rollout-assets: error: --round '../other' is not a round's name")
    assert not (tmp_path / "releases").exists()


@pytest.mark.parametrize(
    ("values", "sentence"),
    [
        ({"test_fraction": "0.1"}, "release setting test_fraction: a number, not a string ('0.1')"),
        ({"test_fraction": True}, "release setting test_fraction: a number, not a boolean (True)"),
        ({"host_names": "build-3.corp.example"},
         "release setting host_names: a list of host names (strings), not a string ('build-3.corp.example')"),
        ({"host_names": ["ok", 7]},
         "release setting host_names: a list of host names (strings), not a list holding something else"),
        ({"split_unit": ["instance"]}, "release setting split_unit: a string, not a list (['instance'])"),
        ({"name": 7}, "release setting name: a string, not a number (7)"),
    ],
)  # fmt: skip
def test_release_config_values_are_type_checked(values: dict[str, Any], sentence: str, tmp_path: Path) -> None:
    config = tmp_path / "release.json"
    config.write_text(json.dumps({"license": "mit", **values}))

    with pytest.raises(ReleaseError) as raised:
        load_config_file(config)
    result = _release(_root(tmp_path), tmp_path / "releases", "--config", config)

    assert str(raised.value).startswith(sentence)
    assert result.returncode == 1 and result.stderr.startswith(f"rollout-assets: error: {sentence}")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "releases").exists()


def test_a_config_file_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    config = tmp_path / "release.json"
    os.mkfifo(config)

    result = _release(_root(tmp_path), tmp_path / "releases", "--config", config, timeout=60)

    assert (result.returncode, result.stderr) == (1, f"rollout-assets: error: {config}: not a readable JSON release "
        f"config ([Errno 22] it is not a regular file: '{config}')\n")  # fmt: skip
    assert not (tmp_path / "releases").exists()


def test_the_dagster_release_config_converts_nothing() -> None:
    from pydantic import ValidationError

    from rollout_assets.defs.assets.release import ReleaseAssetConfig

    assert ReleaseAssetConfig(license="mit", test_fraction=0).test_fraction == 0
    for values in ({"test_fraction": "0.1"}, {"test_fraction": True}, {"host_names": "build-3.corp.example"}):
        with pytest.raises(ValidationError):
            ReleaseAssetConfig(license="mit", **values)
    with pytest.raises(ReleaseError, match="release setting host_names"):
        ReleaseConfig(license="mit", host_names="build-3.corp.example")  # type: ignore[arg-type]


_RELEASE_AS_NOBODY = (
    textwrap.dedent(
        """
        import sys
        import pyarrow, pyarrow.parquet  # read before the drop: the interpreter's folder may be closed
        import rollout_assets.cli as cli
        import rollout_assets.training, rollout_assets.training.verify, rollout_assets.release.release
        import rollout_assets.release.verify, rollout_assets.release.target, rollout_assets.release.data_files
        """
    )
    + DROP_TO_NOBODY
    + "sys.exit(cli.main(sys.argv[1:]))\n"
)


def test_a_release_folder_it_may_not_write_is_one_sentence(world_readable_tmp: Path) -> None:
    root = _root(world_readable_tmp)
    closed = world_readable_tmp / "closed"  # root's, 0755: `nobody` may not write in it
    closed.mkdir()

    result = run_unprivileged(_RELEASE_AS_NOBODY, "release", str(root), str(closed), "--license", "mit")

    assert (result.returncode, result.stderr) == (1, f"rollout-assets: error: release {closed / 'rollout-dataset'} "
        f"not written: [Errno 13] Permission denied: '{closed / '.rollout-dataset.lock'}'\n")  # fmt: skip
    assert os.listdir(closed) == []


def test_a_full_disk_is_one_sentence(tmp_path: Path, small_tmpfs: Path) -> None:
    root = tmp_path / "ledgers"
    write_round(root, "round-001", count=300, pad=2000)

    result = _release(root, small_tmpfs)

    assert result.returncode == 1
    assert result.stderr.startswith(f"rollout-assets: error: release {small_tmpfs / 'rollout-dataset'} not written: "
        "[Errno 28] ")  # fmt: skip
    assert "No space left on device" in result.stderr and len(result.stderr.splitlines()) == 1
    assert os.listdir(small_tmpfs) == []


# --- Loading with `datasets` ---------------------------------------------------------------


def _card_configs(release: Path) -> dict[str, dict[str, str]]:
    """config -> split -> data file, as the card's YAML header lists them."""
    header = (release / "README.md").read_text().split("---\n")[1]
    configs = yaml.safe_load(header).get("configs") or []
    return {config["config_name"]: {f["split"]: f["path"] for f in config["data_files"]} for config in configs}


def _load(release: Path, config: str, cache: Path) -> Any:
    datasets = pytest.importorskip("datasets")
    return datasets.load_dataset(str(release), config, cache_dir=str(cache))


def test_every_config_the_card_lists_loads_and_no_empty_split_is_listed(tmp_path: Path) -> None:
    # One instance of pairs: its pair and its group land in one split, and the other is empty.
    root, out = _root(tmp_path, pairs=1), tmp_path / "releases"
    config = tmp_path / "release.json"
    config.write_text(json.dumps({"test_fraction": 0.5}))
    assert _release(root, out, "--name", "demo", "--config", config).returncode == 0
    release = out / "demo"
    manifest = json.loads((release / "manifest.json").read_text())

    configs = _card_configs(release)

    expected = {
        kind: {split for split, rows in splits.items() if rows}
        for kind, splits in manifest["rows"].items()
        if any(splits.values())
    }
    assert {kind: set(splits) for kind, splits in configs.items()} == expected
    assert set(expected) == {"sft", "preference_pairs", "grpo_groups"} and expected["sft"] == {"train", "test"}
    assert any(len(splits) == 1 for splits in expected.values())  # a kind with an empty split: left out
    for kind, splits in configs.items():
        loaded = _load(release, kind, tmp_path / "cache")
        assert {split: len(loaded[split]) for split in loaded} == {s: manifest["rows"][kind][s] for s in splits}
        assert set(splits.values()) == {name for name in manifest["files"] if Path(name).parent.name == kind}


def test_a_kind_without_rows_is_no_config(tmp_path: Path) -> None:
    root, out = _root(tmp_path, pairs=0), tmp_path / "releases"  # no pairs, no groups
    assert _release(root, out, "--name", "demo").returncode == 0

    assert set(_card_configs(out / "demo")) == {"sft"}
    assert sorted(os.listdir(out / "demo" / "data")) == ["sft"]


def test_a_release_rebuilt_in_place_is_loaded_anew(tmp_path: Path) -> None:
    out, cache = tmp_path / "releases", tmp_path / "cache"
    first = _root(tmp_path / "first", tag="-first")
    assert _release(first, out, "--name", "demo").returncode == 0
    before = _load(out / "demo", "sft", cache)["train"]["metadata"]

    second = _root(tmp_path / "second", tag="-second")
    assert _release(second, out, "--name", "demo").returncode == 0
    after = _load(out / "demo", "sft", cache)["train"]["metadata"]  # the same cache folder

    first_ids = {row["rollout_id"] for row in before}
    assert first_ids and not first_ids & {row["rollout_id"] for row in after}
    assert sorted(row["rollout_id"] for row in after) == sorted(
        row["rollout_id"] for row in _load(out / "demo", "sft", tmp_path / "fresh-cache")["train"]["metadata"]
    )
