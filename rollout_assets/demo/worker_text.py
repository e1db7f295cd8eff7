"""What a worker session says: its prompt, and the input, output and title of its tool calls.

OWNS the text of opencode parts (the read, bash, grep and edit calls, and the first call's
planted outputs: a >= 200 kB pytest log, a JSON object instead of a string) and of the planted
sessions' extras (a kept system prompt, a file attached to the prompt, a plugin's status
message, a second tool call in one step, an answer given without tools); the rows that carry
it are opencode_store.py's.
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


def worker_prompt(cell: Cell, cwd: str, subtask: int) -> str:
    """The supervisor's task of subtask `subtask` (worker k's is subtask k): the same in every rep
    and campaign of the instance but for the worker's own name and clone, as a scripted
    supervisor words it."""
    name = cwd.rsplit("/", 1)[-1]
    return (
        f"You are worker {name} on {cell.scenario_id}. Your subtask: {subtask_titles(subtask + 1)[subtask]}; "
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


def system_prompt(cwd: str) -> list[str]:
    """The system messages older opencode sent (and kept on each assistant message as `system`):
    its provider prompt, then the environment block naming the working directory."""
    return [
        "You are opencode, an interactive CLI tool that helps users with software engineering tasks. "
        "Use the instructions below and the tools available to you to assist the user.",
        "Here is some useful information about the environment you are running in:\n<env>\n"
        f"  Working directory: {cwd}\n  Is directory a git repo: yes\n  Platform: linux\n</env>",
    ]


def attached_file_parts(cell: Cell, cwd: str) -> list[dict[str, Any]]:
    """A text file attached to the prompt, as opencode stores it (`createUserMessage` in
    packages/opencode/src/session/prompt.ts): the Read call and its result as synthetic text,
    sent to the model, then the `file` part itself (text/plain), which is not sent again."""
    path = f"{cwd}/{cell.touched_file}"
    listing = "\n".join(_NUMBERED_LISTING[:12])
    call = f'Called the Read tool with the following input: {{"filePath":"{path}"}}'
    return [
        {"type": "text", "synthetic": True, "text": call},
        {"type": "text", "synthetic": True, "text": f"<file>\n{listing}\n</file>"},
        {"type": "file", "mime": "text/plain", "filename": cell.touched_file, "url": f"file://{path}"},
    ]


# What a plugin posts with `session.prompt({noReply: true, parts: [{type: "text", text, ignored: true}]})`
# (an "inline status message"): shown in opencode's UI, never sent to the model.
PLUGIN_STATUS_TEXT = "[status] worker finished: 1 file changed, regression test passing"


def second_tool_call(cell: Cell, cwd: str) -> tuple[dict[str, Any], str, str]:
    """(input, output, title) of the second tool the model called in the same step: a grep,
    its output fixed (no random draw, so the round's later values stay as they were)."""
    path = f"{cwd}/{cell.touched_file}"
    hits = "\n".join(f"{path}:{line}: def _resolve(self, value):" for line in (41, 317))
    return {"pattern": "def _resolve", "path": cwd}, f"Found 2 matches\n{hits}", "def _resolve"


def answer_text(cell: Cell) -> str:
    """A worker's whole answer when it needs no tool: the same words every time it is asked."""
    return (
        f"The failure comes from `_resolve` in {cell.touched_file}: an empty tuple from the public API "
        "reaches it and is coerced instead of falling back to the default. The smallest fix is to "
        "test `if value is None or value == ():` before coercing."
    )
