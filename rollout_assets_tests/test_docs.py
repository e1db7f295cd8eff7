"""The documentation against the project: the names it gives and the links it makes.

README.md and docs/*.md name Dagster things in backticks: assets (`rollout_ledger`), checks
(`every_cell_has_one_supervisor_line`), jobs, sensors, resources. A rename on the code's side
must not leave the docs naming something that is gone. Every snake_case word in backticks
(inline or in a fenced block) therefore has to be one of:

- a name the definitions hold (asset keys, check names, resource keys, jobs, sensors,
  schedules), read from `rollout_assets.definitions.defs`, so nothing here lists them;
- a field of a ledger line, read from the line's JSON Schema;
- a name on NOT_DAGSTER_NAMES below: metadata keys, summary columns, gap kinds, Python and
  configuration names.

A snake_case word that is part of a path or a dotted name (`rollout_assets/`,
`parse_floor.py`, `rollout_assets.definitions`, `gc.freeze`) is a file or module name, not a
Dagster name, and is left alone. A new name in the docs that is none of these fails the test:
either it is a typo, or it belongs on the list with the kind of thing it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
README = PROJECT_DIR / "README.md"
README_MAX_LINES = 220

# Backticked snake_case names that are not Dagster definitions, by kind.
NOT_DAGSTER_NAMES = frozenset(
    {
        # metadata keys of assets and failures
        "cells_without_worker_list",
        "input_fingerprint",
        "invalid_partition_keys",
        "joined_worker_lines",
        "may_pass",
        "reward_labeled",
        "rounds_without_directory",
        "rounds_without_stats_list",
        "rounds_without_stats_reasons",
        "transcripts_dropped",
        "unwarranted_joined_worker",
        # metadata keys of inspect_logs, and keys of an Inspect log sample's metadata
        "open_with",
        "parent_line",
        "proposer_line",
        "proposer_rollout_id",
        "samples_per_log",
        # Inspect AI's names: its package, functions, log fields and data frame columns
        "input_contains",
        "inspect_ai",
        "model_usage",
        "parse_error",
        "read_eval_log",
        "score_reward",
        "scored_samples",
        "total_cost",
        "total_time",
        "total_tokens",
        "unscored_samples",
        "write_eval_log",
        # columns of rounds-summary.parquet
        "cost_usd",
        "cost_usd_recorded",
        "gap_lines",
        "gap_rate",
        "lines_agent",
        "lines_proposer",
        "lines_supervisor",
        "lines_worker",
        "mean_reward_agent",
        "mean_reward_proposer",
        "mean_reward_supervisor",
        "mean_reward_worker",
        "opencode_db_available",
        "reward_labeled_share",
        "round_dir_present",
        # keys of a line's `outcome.metrics` (a free-form object in the schema)
        "agent_key",
        "ended_at",
        "started_at",
        "exit_code",
        "has_session",
        "instance_count",
        "judge_attempts",
        "judge_wall_s",
        "max_shots",
        "patch_lines",
        "prompt_sha256",
        "recovered_tokens",
        "resolved_count",
        "session_agent",
        "session_parent_id",
        "spent_tokens",
        "spent_usd",
        "timed_out",
        "verify_pass",
        "worker_cwd",
        "worker_list_missing",
        # gap kinds (stats `byGapReason`, metadata `gap_<kind>`)
        "claude_transcript_empty",
        "claude_transcripts_unreadable",
        "no_claude_transcript",
        "no_opencode_session",
        "opencode_session_empty",
        "opencode_store_unavailable",
        "supervisor_transcript_not_persisted",
        "supervisor_worker_list_missing",
        # claim kinds of `every_gap_is_warranted` that are not gaps
        "joined_worker",
        # keys of the sensor's cursor
        "retry_at",
        # fields of the inputs (opencode store columns, Claude transcript lines, result.json)
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "input_tokens",
        "message_id",
        "output_tokens",
        "parent_id",
        "session_id",
        "sup_status",
        "sup_verdict",
        "time_created",
        "time_updated",
        "tokens_cache_read",
        "tokens_cache_write",
        "tokens_input",
        "tokens_output",
        "tool_result",
        "tool_use",
        "tool_use_id",
        # Python, Dagster, instance-configuration and tool names
        "blocking_checks",
        "copy_file_range",
        "in_process_executor",
        "max_runtime_seconds",
        "parse_constant",
        "partitions_def",
        "pg_ctl",
        "run_k8s_config",
        "tag_concurrency_limits",
    }
)

# `word_word` not inside a path or a dotted name: neither preceded by a word character, `.`,
# `/` or `-`, nor followed by a word character, `/` or `-`, nor by `.` and more of the name.
_SNAKE_CASE = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/-])(?!\.\w)")
_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_REFERENCE_LINK = re.compile(r"^\s*\[[^\]\n]+\]:\s+(\S+)", re.MULTILINE)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def documentation_files() -> list[Path]:
    return [README, *sorted((PROJECT_DIR / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Mention:
    path: Path
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.path.name}:{self.line}: `{self.name}`"


def code_spans(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every piece of code: each line of a fenced block, and each
    inline `code` span outside the fenced blocks."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
            continue
        if in_fence:
            yield number, line
        else:
            for match in _INLINE_CODE.finditer(line):
                yield number, match[1]


def snake_case_mentions(paths: Iterable[Path]) -> Iterator[Mention]:
    for path in paths:
        for number, code in code_spans(path.read_text(encoding="utf-8")):
            for match in _SNAKE_CASE.finditer(code):
                yield Mention(path, number, match[0])


def undefined_names(paths: Iterable[Path], known: frozenset[str]) -> list[Mention]:
    return [mention for mention in snake_case_mentions(paths) if mention.name not in known]


def _schema_property_names(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                yield from value
            yield from _schema_property_names(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _schema_property_names(value)


def definition_names() -> frozenset[str]:
    """Every name the definitions hold: asset keys (each part), check names, resource keys,
    jobs, sensors and schedules; Dagster's own hidden job (`__ASSET_JOB`) left out."""
    from rollout_assets.definitions import defs

    repository = defs.get_repository_def()
    graph = repository.asset_graph
    names = {part for key in graph.get_all_asset_keys() for part in key.path}
    names |= {key.name for key in graph.asset_check_keys}
    # the step that materializes several assets at once (a multi-asset's op) has a name of its own
    names |= {assets.op.name for assets in graph.assets_defs if assets.is_executable and assets.node_def is not None}
    names |= set(repository.get_top_level_resources())
    names |= {job.name for job in repository.get_all_jobs() if not job.name.startswith("__")}
    names |= {sensor.name for sensor in repository.sensor_defs}
    names |= {schedule.name for schedule in repository.schedule_defs}
    return frozenset(names)


@pytest.fixture(scope="module")
def known_names() -> frozenset[str]:
    from rollout_assets.ledger import rollout_json_schema

    line_fields = frozenset(_schema_property_names(rollout_json_schema()))
    return definition_names() | line_fields | training_names() | NOT_DAGSTER_NAMES


def training_names() -> frozenset[str]:
    """Names of the training data and the release, read from the code that defines them: the
    drop reasons, the columns of the Arrow schemas and the fields of their metadata, the kinds
    of identifiers normalized, and the fields of the assets' run config."""
    from rollout_assets.defs.assets.release import ReleaseAssetConfig
    from rollout_assets.defs.assets.training import TrainingConfig
    from rollout_assets.training import DROP_REASONS
    from rollout_assets.training.arrow import schemas
    from rollout_assets.training.identifiers import KINDS

    columns = {name for schema in schemas().values() for name in schema.names}
    columns |= {field.name for schema in schemas().values() for field in schema.field("metadata").type}
    config = set(TrainingConfig.model_fields) | set(ReleaseAssetConfig.model_fields)
    return frozenset(DROP_REASONS) | frozenset(columns) | frozenset(config) | frozenset(KINDS)


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


def test_every_backticked_name_in_the_docs_is_defined(known_names: frozenset[str]) -> None:
    unknown = undefined_names(documentation_files(), known_names)
    assert not unknown, (
        "names in backticks that are neither in the definitions, nor ledger fields, nor on "
        "NOT_DAGSTER_NAMES:\n" + "\n".join(map(str, unknown))
    )


def test_the_docs_name_every_asset_check_and_sensor() -> None:
    """The reverse direction, for what a reader looks up: every asset, check, job and sensor
    is named somewhere in the docs."""
    mentioned = {mention.name for mention in snake_case_mentions(documentation_files())}
    from rollout_assets.definitions import defs

    repository = defs.get_repository_def()
    graph = repository.asset_graph
    defined = {key.path[-1] for key in graph.get_all_asset_keys()}
    defined |= {key.name for key in graph.asset_check_keys}
    defined |= {job.name for job in repository.get_all_jobs() if not job.name.startswith("__")}
    defined |= {sensor.name for sensor in repository.sensor_defs}
    assert sorted(defined - mentioned) == []


def test_a_wrong_name_in_a_doc_is_found(tmp_path: Path, known_names: frozenset[str]) -> None:
    doc = tmp_path / "planted.md"
    doc.write_text(
        "The asset `rollout_ledgers` is checked by `every_cell_has_one_supervisor_line`.\n"
        "| `rollout_stats` | `stats_reconcile_with_ledgr` |\n"
        "```bash\n"
        "dagster sensor stop round_dir_sensor -w workspace.yaml\n"
        "```\n"
        "Paths and modules are not names: `rollout_assets/defs/`, `bench/parse_floor.py`, "
        "`rollout_assets.definitions`, `gc.freeze`; nor is prose outside backticks: rollout_ledgerz.\n",
        encoding="utf-8",
    )
    found = [(mention.line, mention.name) for mention in undefined_names([doc], known_names)]
    assert found == [(1, "rollout_ledgers"), (2, "stats_reconcile_with_ledgr"), (4, "round_dir_sensor")]


def test_names_inside_longer_code_are_found() -> None:
    code = "check every_worker_session_accounted_for: FAILED; --select 'group:rounds' -m rollout_assets.definitions"
    assert [match[0] for match in _SNAKE_CASE.finditer(code)] == ["every_worker_session_accounted_for"]
    for path_like in (
        "stages/built-from/x.json",
        "bench/bench_sensor.py",
        "rollout_assets_tests/",
        "gap_<reason>",
    ):
        assert _SNAKE_CASE.findall(path_like) == [], path_like


# ---------------------------------------------------------------------------
# Links
# ---------------------------------------------------------------------------


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped,
    spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def heading_anchors(text: str) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
            continue
        match = None if in_fence else _HEADING.match(line)
        if match is None:
            continue
        anchor = github_anchor(match[2])
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return anchors


def relative_links(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link that is not a URL, outside code."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        prose = _INLINE_CODE.sub("", line)
        for target in [*_LINK.findall(prose), *_REFERENCE_LINK.findall(prose)]:
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                yield number, target


def broken_links_in(text: str, folder: Path, name: str) -> list[str]:
    """The links of a page `name` holding `text` in `folder` that lead to no file, or to no
    heading of the Markdown file they name."""
    broken = []
    for number, target in relative_links(text):
        file_part, _, anchor = target.partition("#")
        linked = (folder / file_part).resolve() if file_part else None
        where = f"{name}:{number}: {target}"
        if linked is not None and not linked.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and (linked is None or linked.suffix == ".md"):
            anchors = heading_anchors(text if linked is None else linked.read_text(encoding="utf-8"))
            if anchor not in anchors:
                broken.append(f"{where} (no such heading)")
    return broken


def broken_links(paths: Iterable[Path]) -> list[str]:
    return [
        problem
        for path in paths
        for problem in broken_links_in(
            path.read_text(encoding="utf-8"), path.parent, str(path.relative_to(PROJECT_DIR))
        )
    ]


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    assert broken_links(documentation_files()) == []


def test_a_broken_link_is_found() -> None:
    docs = PROJECT_DIR / "docs"
    good = "# Top\n[stages](stages.md) [ids](line-format.md#ids) [up](../README.md) [web](https://dagster.io) [top](#top)"
    assert broken_links_in(good, docs, "planted.md") == []
    bad = "[gone](no-such-page.md) [heading](line-format.md#no-such-heading) [here](#nowhere) `[code](x.md)`"
    assert [problem.rsplit(" (", 1)[-1] for problem in broken_links_in(bad, docs, "planted.md")] == [
        "no such file)",
        "no such heading)",
        "no such heading)",
    ]


# ---------------------------------------------------------------------------
# Shape
# ---------------------------------------------------------------------------


def test_the_readme_stays_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; the rest belongs under docs/"


def test_the_readme_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)[:3]
    assert [block.split("#")[0].strip() for block in first_blocks] == [
        "bash scripts/demo.sh",
        "bash scripts/test.sh",
        "bash scripts/ui.sh",
    ]


def _level_two_headings(path: Path) -> list[str]:
    return [
        match[2]
        for line in path.read_text(encoding="utf-8").splitlines()
        if (match := _HEADING.match(line)) and match[1] == "##"
    ]


def test_input_formats_keeps_the_section_numbers_the_code_cites() -> None:
    headings = _level_two_headings(PROJECT_DIR / "docs" / "input-formats.md")
    numbered = [heading for heading in headings if re.match(r"\d+\. ", heading)]
    assert [heading.split(".")[0] for heading in numbered] == ["1", "2", "3", "4", "5", "6"]
    topics = [
        "improvement run",
        "manifest",
        "proposer shots",
        "opencode store",
        "claude code transcripts",
        "joining",
    ]
    for heading, topic in zip(numbered, topics):
        assert topic in heading.lower(), heading


LINE_FORMAT_SECTIONS = (
    "Top level",
    "Supervisor line",
    "Worker lines",
    "Proposer lines",
    "Order of lines",
    "Ids",
    "Stats",
)


def test_line_format_keeps_the_section_names_the_code_cites() -> None:
    headings = _level_two_headings(PROJECT_DIR / "docs" / "line-format.md")
    assert [name for name in LINE_FORMAT_SECTIONS if name not in headings] == []


def wrong_citations(text: str) -> list[str]:
    """The citations of the two format pages in `text` ("docs/input-formats.md §4",
    "docs/input-formats.md §1-3", "docs/line-format.md, Ids") that name no section of theirs."""
    sections = set(_level_two_headings(PROJECT_DIR / "docs" / "line-format.md"))
    numbers = {
        heading.split(".")[0] for heading in _level_two_headings(PROJECT_DIR / "docs" / "input-formats.md")
    }
    wrong = []
    for cited in re.findall(r"docs/input-formats\.md §(\d+(?:\s*[-–]\s*§?\d+)?)", text):
        ends = [int(end.strip(" §")) for end in re.split(r"[-–]", cited)]
        wrong += [
            f"docs/input-formats.md §{n}" for n in range(ends[0], ends[-1] + 1) if str(n) not in numbers
        ]
    for cited in re.findall(r"docs/line-format\.md, ([A-Z][A-Za-z]*(?: [a-z]+)*)", text):
        if not any(cited.startswith(section) for section in sections):
            wrong.append(f"docs/line-format.md, {cited}")
    return wrong


def test_citations_of_the_two_format_pages_name_existing_sections() -> None:
    """The code cites "docs/input-formats.md §4" and "docs/line-format.md, Ids"; each must exist."""
    wrong = [
        f"{path.relative_to(PROJECT_DIR)}: {citation}"
        for folder in ("rollout_assets", "rollout_assets_tests", "bench")
        for path in sorted((PROJECT_DIR / folder).rglob("*.py"))
        if path != Path(__file__).resolve()  # this file plants wrong citations on purpose
        for citation in wrong_citations(path.read_text(encoding="utf-8"))
    ]
    assert wrong == []


def test_a_wrong_citation_is_found() -> None:
    good = "(docs/input-formats.md §4) docs/input-formats.md §1-3 (docs/line-format.md, Ids: uuid5) docs/line-format.md, Order of lines."
    assert wrong_citations(good) == []
    bad = "docs/input-formats.md §7 and docs/input-formats.md §5-§8 and (docs/line-format.md, Idz)"
    assert wrong_citations(bad) == [
        "docs/input-formats.md §7",
        "docs/input-formats.md §7",
        "docs/input-formats.md §8",
        "docs/line-format.md, Idz",
    ]
