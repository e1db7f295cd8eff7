"""Inspect's log viewer on a round's logs, proven in a real browser, offline.

Writes the Inspect logs of the demo's round-001 ledger, starts `inspect view --host 127.0.0.1
--port P --log-dir ...` for real, and drives headless Chromium (Debian's package, through
Playwright): the list of logs, a worker's transcript with a tool call and its output, a gap line
with its reason. Every request that would leave 127.0.0.1 is refused and recorded: the viewer
must need none. Screenshots are kept in $ROLLOUT_TEST_ARTIFACTS (default ./test-artifacts) under
inspect-view/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollout_assets.inspect_logs import write_inspect_logs
from rollout_assets.inspect_logs.index import log_file_name
from rollout_assets.inspect_logs.samples import GAP_INPUT_PREFIX
from rollout_assets.inspect_logs.viewer import view_command
from rollout_assets_tests.inspect_ledgers import demo_ledgers, ledger_lines
from rollout_assets_tests.inspect_viewer import viewer
from rollout_assets_tests.test_ui import CHROMIUM, CHROMIUM_ARGS, artifacts_folder


@pytest.fixture(scope="module")
def artifacts() -> Path:
    return artifacts_folder("inspect-view")


@pytest.fixture(scope="module")
def round_logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(ledger, logs folder) of the demo's round-001."""
    root = tmp_path_factory.mktemp("inspect-view")
    ledger = demo_ledgers(root)["round-001"]
    write_inspect_logs(ledger, root / "logs")
    return ledger, root / "logs"


def _first(ledger: Path, role: str, *, gap: bool) -> tuple[int, dict[str, Any]]:
    return next((n, line) for n, line in ledger_lines(ledger) if line["role"] == role and bool(line["messages"]) != gap)


def _tool_call_and_output(line: dict[str, Any]) -> tuple[str, str]:
    """The name of the first tool call whose output has text, and that output's first line."""
    outputs = {m["tool_call_id"]: m["content"] for m in line["messages"] if m["role"] == "tool" and m["content"]}
    for message in line["messages"]:
        for call in message.get("tool_calls") or []:
            if outputs.get(call["id"], "").strip():
                return call["function"]["name"], outputs[call["id"]].strip().splitlines()[0][:60]
    raise AssertionError("no tool call with an output in the line")


@pytest.mark.slow
def test_the_viewer_shows_a_workers_tool_calls_and_a_gap_lines_reason_offline(round_logs, artifacts, tmp_path) -> None:
    from playwright.sync_api import expect, sync_playwright

    assert CHROMIUM.exists(), "Chromium is missing: apt-get install chromium (scripts/system-deps.sh does)"
    ledger, folder = round_logs
    worker_line, worker = _first(ledger, "worker", gap=False)
    gap_line, gap = _first(ledger, "worker", gap=True)
    tool, output = _tool_call_and_output(worker)
    prompt = worker["messages"][0]["content"][:50]
    log = log_file_name("worker", worker["candidate_id"])
    gap_log = log_file_name("worker", gap["candidate_id"])
    left_the_machine: list[str] = []

    def local_only(route: Any) -> None:
        if route.request.url.startswith("http://127.0.0.1:"):
            route.continue_()
        else:
            left_the_machine.append(route.request.url)
            route.abort()

    with viewer(lambda port: view_command(folder, port), tmp_path / "inspect-view.log") as shown, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            context.route("**/*", local_only)
            page = context.new_page()

            page.goto(shown.url)
            for name in ("supervisor-baseline", "worker-baseline", "proposer-gen0-cand1", "agent-gen0-cand1"):
                expect(page.get_by_text(name, exact=True).first).to_be_visible(timeout=60_000)
            page.screenshot(path=artifacts / "logs.png")

            page.get_by_text(log.removesuffix(".eval"), exact=True).first.click()
            expect(page.get_by_text(prompt).first).to_be_visible(timeout=60_000)
            page.screenshot(path=artifacts / "worker-log.png")
            page.get_by_text(prompt).first.click()
            expect(page.get_by_text(f"Sample {worker_line} (Epoch 1)").first).to_be_visible(timeout=60_000)
            expect(page.get_by_text(tool, exact=True).first).to_be_visible(timeout=60_000)
            expect(page.get_by_text(output).first).to_be_visible()
            page.screenshot(path=artifacts / "worker-sample.png", full_page=True)

            page.goto(f"{shown.url}/#/tasks/{gap_log}/samples/sample/{gap_line}/1/")
            expect(page.get_by_text(GAP_INPUT_PREFIX + gap["provenance"]["gap"]).first).to_be_visible(timeout=60_000)
            expect(page.get_by_text("No messages").first).to_be_visible()
            page.screenshot(path=artifacts / "gap-sample.png", full_page=True)
        finally:
            browser.close()
    assert left_the_machine == []
    # The viewer served the assets inside the wheel; it says so when it had to fetch them instead.
    assert "Serving static data from" not in (tmp_path / "inspect-view.log").read_text()
    assert sorted(path.name for path in artifacts.iterdir()) == ["gap-sample.png", "logs.png", "worker-log.png", "worker-sample.png"]
