"""The dataset card (README.md, with the Hugging Face YAML header) and manifest.json of a
release: every number in them comes from the files written or the rounds' own reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollout_assets.release.build import KINDS, SPLITS
from rollout_assets.release.data_files import split_of_file

REWARD_MEANING = {
    "supervisor": "the cell's official judge verdict (composite score, else 1/0 resolved)",
    "worker": "the verdict of the cell the worker served, inherited from its supervisor",
    "proposer": "the resolved fraction of the candidate the proposer wrote, over the baseline's instances",
}
KNOWN_LIMITS = (
    "Worker rewards are inherited from their cell's verdict, not a measure of the worker's own contribution.",
    "Token counts are estimates (UTF-8 bytes of the text / 4), not a tokenizer's count.",
    "Scrubbing replaces known secret shapes and configured host names; a secret of an unknown shape can survive "
    "it, which is why every release is scanned independently before it is accepted.",
    "Preference pairs and GRPO groups only compare transcripts whose prompts are identical.",
)


def rows_table(manifest: dict[str, Any]) -> list[str]:
    lines = ["| kind | split | rows |", "|---|---|---|"]
    for kind in KINDS:
        for split in SPLITS:
            lines.append(f"| {kind} | {split} | {manifest['rows'][kind][split]} |")
    return lines


def _yaml_header(manifest: dict[str, Any]) -> list[str]:
    """License, name and one config per kind with rows, naming each data file exactly (its name
    carries its digest, so a rebuilt release is never read from a stale `datasets` cache; a
    split without rows has no file, a kind without rows no config)."""
    configs = []
    for kind in KINDS:
        files = [(split_of_file(Path(name))[1], name) for name in manifest["files"] if Path(name).parent.name == kind]
        if files:
            configs += [f"- config_name: {kind}", "  data_files:"]
            configs += [line for split, name in files for line in (f"  - split: {split}", f"    path: {name}")]
    lines = ["---", f"license: {manifest['license']}", f"pretty_name: {manifest['name']}"]
    return [*lines, *(["configs:", *configs] if configs else []), "---"]


def dataset_card(manifest: dict[str, Any]) -> str:
    config = manifest["config"]
    lines = [
        *_yaml_header(manifest),
        f"# {manifest['name']}",
        "",
        "Agent transcripts from improvement-loop rounds (supervisor, worker and proposer invocations on "
        "SWE-bench-style instances), as SFT rows, preference pairs and GRPO groups, built from "
        "`tangle.rollout.v1` ledgers.",
        "",
        "## Rows",
        "",
        *rows_table(manifest),
        "",
        f"Rows go to train or test by a stable hash of their {config['split_unit']} "
        f"(test fraction {config['test_fraction']}), so no {config['split_unit']} is in both splits: "
        f"{manifest['instances']['train']} instances in train, {manifest['instances']['test']} in test. "
        f"Exact duplicates across rounds are written once ({sum(manifest['duplicates_skipped'].values())} skipped).",
        "",
        "## Rounds",
        "",
        "| round | ledger sha256 | lines |",
        "|---|---|---|",
        *[f"| {r['round']} | `{r['ledger_sha256']}` | {r['lines']} |" for r in manifest["rounds"]],
        "",
        "## Rewards",
        "",
        *[f"- **{role}**: {meaning}." for role, meaning in REWARD_MEANING.items()],
        "",
        "## Models, tokens and cost",
        "",
        f"- Models: {', '.join(manifest['models']) or 'none recorded'}.",
        f"- SFT tokens (estimated): {manifest['sft_tokens']['train']} in train, {manifest['sft_tokens']['test']} in test.",
        f"- Cost of the rounds' recorded invocations: {manifest['cost_usd']:.2f} USD.",
        "",
        "## Filter and drops",
        "",
        f"Training filter: `{manifest['filter']}`.",
        "",
        "| dataset | lines | rows | dropped |",
        "|---|---|---|---|",
        *[f"| {name} | {d['lines']} | {d['rows']} | {d['dropped']} |" for name, d in manifest["drops"].items()],
        "",
        "## Scrubbing",
        "",
        "| rule | replacements |",
        "|---|---|",
        *[f"| {rule} | {count} |" for rule, count in manifest["scrubbed"].items()],
        "",
        "## Known limits",
        "",
        *[f"- {limit}" for limit in KNOWN_LIMITS],
        "",
    ]
    return "\n".join(lines)
