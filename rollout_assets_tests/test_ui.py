"""The Dagster UI, proven in a real browser: lineage, a materialized round, its checks.

Starts `dagster dev` on a free loopback port against a DAGSTER_HOME that already holds a
materialized demo round, drives headless Chromium (Debian's package, through Playwright)
and asserts what a person would see. Screenshots are kept in $ROLLOUT_TEST_ARTIFACTS
(default ./test-artifacts/ui) for a look after the run.
"""

import os
import shutil
from pathlib import Path

import pytest

from rollout_assets.demo import DEFAULT_ROUNDS, write_demo
from rollout_assets.materialize import materialize_rounds
from rollout_assets_tests.dagster_dev import PROJECT, dagster_dev

CHROMIUM = Path("/usr/bin/chromium")
# As root Chromium needs --no-sandbox; the network flags stop it from calling out of a
# machine that has no network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROUND_ASSETS = [
    "round_manifest",
    "campaign_cells",
    "worker_sessions",
    "proposer_transcripts",
    "rollout_ledger",
    "rollout_stats",
]
EXTERNAL_INPUTS = ["round_outdir", "opencode_db", "claude_projects"]
LEDGER_CHECKS = [
    "every_cell_has_one_supervisor_line",
    "every_gap_is_warranted",
    "every_line_is_its_invocation_in_order",
    "every_shot_receipt_has_one_proposer_line",
    "every_usage_is_its_transcripts",
    "every_worker_session_accounted_for",
    "ledger_lines_valid_and_linked",
]


def artifacts_folder(name: str) -> Path:
    """A fresh folder for a browser test's screenshots (ROLLOUT_TEST_ARTIFACTS, else ./test-artifacts)."""
    folder = Path(os.environ.get("ROLLOUT_TEST_ARTIFACTS", PROJECT / "test-artifacts")) / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def artifacts() -> Path:
    return artifacts_folder("ui")


@pytest.fixture(scope="module")
def materialized_instance(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A DAGSTER_HOME holding one materialized, checked demo round; the env to reach it."""
    root = tmp_path_factory.mktemp("ui")
    layout = write_demo(root / "demo", DEFAULT_ROUNDS[:1])
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "local" / "dagster.yaml", home / "dagster.yaml")
    env = {
        "DAGSTER_HOME": str(home),
        **layout.environment(root / "ledgers"),
        # The round is already materialized: keep the sensor from queueing it again.
        "ROLLOUT_QUIET_PERIOD_SECONDS": "1000000",
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        import importlib

        import rollout_assets.definitions

        importlib.reload(rollout_assets.definitions)
        assert materialize_rounds([layout.rounds[0].name]) == 0
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return {**os.environ, **env}


@pytest.mark.slow
def test_the_ui_shows_lineage_a_materialized_round_and_passed_checks(materialized_instance, artifacts, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    assert CHROMIUM.exists(), "Chromium is missing: apt-get install chromium (scripts/system-deps.sh does)"
    with dagster_dev(materialized_instance, tmp_path / "dagster-dev.log") as server, sync_playwright() as playwright:
        url = server.url
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 2400, "height": 1300})
            # Skip the "join the community" dialog without writing anything to the instance.
            context.add_init_script("window.localStorage.setItem('communityNux', '1')")
            page = context.new_page()

            page.goto(f"{url}/asset-groups?expanded=global@global:rounds,global@global:sources")
            for name in [*ROUND_ASSETS, *EXTERNAL_INPUTS]:
                expect(page.get_by_text(name, exact=True).first).to_be_visible(timeout=30_000)
            page.screenshot(path=artifacts / "lineage.png")

            page.goto(f"{url}/assets/rollout_ledger?view=partitions")
            expect(page.get_by_text("Materialized (1)")).to_be_visible(timeout=30_000)
            expect(page.get_by_text("Missing (0)")).to_be_visible()
            expect(page.get_by_text("Failed (0)")).to_be_visible()
            expect(page.get_by_text("round-001").first).to_be_visible()
            page.screenshot(path=artifacts / "rollout_ledger-partitions.png")

            page.goto(f"{url}/assets/rollout_ledger?view=checks&partition=round-001")
            expect(page.get_by_text(f"Checks ({len(LEDGER_CHECKS)})")).to_be_visible(timeout=30_000)
            for check in LEDGER_CHECKS:
                expect(page.get_by_text(check, exact=True).first).to_be_visible()
            # Every check's latest execution succeeded.
            expect(page.get_by_text("Succeeded", exact=True)).to_have_count(len(LEDGER_CHECKS))
            expect(page.get_by_text("Passed", exact=True).first).to_be_visible()
            page.screenshot(path=artifacts / "rollout_ledger-checks.png")
        finally:
            browser.close()
    assert sorted(p.name for p in artifacts.iterdir()) == [
        "lineage.png",
        "rollout_ledger-checks.png",
        "rollout_ledger-partitions.png",
    ]
