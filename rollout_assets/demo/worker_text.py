"""What a worker session says: its prompt, and the input, output and title of its tool calls.

OWNS the text of opencode parts (the read, bash, grep and edit calls, and the first call's
planted outputs: a >= 200 kB pytest log, a JSON object instead of a string); the rows that
carry it are opencode_store.py's.
"""

from __future__ import annotations

import random
from typing import Any

from rollout_assets.demo.plan import Cell
from rollout_assets.demo.planted import SessionShape
from rollout_assets.demo.world import NON_ASCII_SAMPLE

TOOLS = ("read", "bash", "grep", "edit")
_LONG_OUTPUT_LINES = 3300  # ~66 bytes a line: > 200 kB


_SUBTASKS = ("Reproduce the failing test", "Patch the root cause", "Run the regression suite")


def subtask_titles(count: int) -> list[str]:
    """The subtasks the scripted supervisor gives its workers, worker k the k-th."""
    return [_SUBTASKS[k % len(_SUBTASKS)] + ("" if k < len(_SUBTASKS) else f" ({k + 1})") for k in range(count)]


def worker_prompt(cell: Cell, cwd: str, worker: int) -> str:
    """The supervisor's task for worker `worker`: the same in every rep and campaign of the
    instance but for the worker's own name and clone, as a scripted supervisor words it."""
    name = cwd.rsplit("/", 1)[-1]
    return (
        f"You are worker {name} on {cell.scenario_id}. Your subtask: {subtask_titles(worker + 1)[worker]}; "
        f"the fix belongs in {cell.touched_file}, with the smallest patch. Work only inside {cwd}. "
        f"Mind the unicode fixtures: {NON_ASCII_SAMPLE}"
    )


_CODE_LINES = (
    "def _resolve(self, value):",
    "    if value is None:",
    "        return self.default",
    "    return self._coerce(value)",
    "",
    "class Options:",
    '    """Holds the per-model configuration."""',
    "    def __init__(self, meta, app_label=None):",
    "        self.meta = meta",
    "        self.app_label = app_label",
)
# What opencode's read tool shows of a file: numbered lines. Built once; a read is a slice of it.
_NUMBERED_LISTING = tuple(f"{n:05d}| {_CODE_LINES[n % len(_CODE_LINES)]}" for n in range(1, 900))


def tool_call(
    cell: Cell, cwd: str, tool: str, rng: random.Random, shape: SessionShape | None
) -> tuple[dict[str, Any], Any, str]:
    """(input, output, title) of one tool call; `shape` plants the first call's defects."""
    path = f"{cwd}/{cell.touched_file}"
    if shape is not None and shape.long_tool_output:
        lines = [
            f"tests/test_regressions.py::test_case_{n:05d} PASSED{' ' * 20}[{n * 100 // _LONG_OUTPUT_LINES:3d}%]"
            for n in range(_LONG_OUTPUT_LINES)
        ]
        return (
            {"command": "python -m pytest tests -vv", "description": "Run the whole suite"},
            "\n".join(lines),
            "pytest -vv",
        )
    if shape is not None and shape.object_tool_output:
        todos = [{"content": "Reproduce the failure", "status": "completed", "priority": "high"}]
        todos.append({"content": "Patch the root cause", "status": "in_progress", "priority": "high"})
        return {"todos": todos}, {"todos": todos, "remaining": 1}, "2 todos"
    if tool == "read":
        start = rng.randint(1, 800)
        count = rng.randint(20, 60)
        body = "\n".join(_NUMBERED_LISTING[start - 1 : start - 1 + count])
        return (
            {"filePath": path, "offset": start, "limit": count},
            f"<file>\n{body}\n</file>",
            cell.touched_file,
        )
    if tool == "bash":
        failures = rng.randint(0, 2)
        output = (
            f"============================= test session starts ==============================\n"
            f"collected {rng.randint(5, 300)} items\n\n"
            + "".join(f"FAILED tests/test_core.py::test_edge_{k} - AssertionError\n" for k in range(failures))
            + f"========================= {failures} failed, {rng.randint(5, 300)} passed in "
            f"{rng.uniform(0.5, 40):.2f}s =========================\n"
        )
        return (
            {"command": "python -m pytest tests -x -q", "description": "Run the failing tests"},
            output,
            "pytest",
        )
    if tool == "grep":
        hits = "\n".join(
            f"{path}:{rng.randint(1, 900)}: def _resolve(self, value):" for _ in range(rng.randint(1, 4))
        )
        return {"pattern": "_resolve", "path": cwd}, f"Found matches\n{hits}", "_resolve"
    edit = {
        "filePath": path,
        "oldString": "if value is None:",
        "newString": "if value is None or value == ():",
    }
    return edit, "Edit applied successfully.", cell.touched_file
