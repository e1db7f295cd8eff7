"""Claude Code transcripts of proposer shots: session files of lines chained by uuid/parentUuid.

OWNS the line format as Claude Code writes it (summary and queue-operation lines, user lines,
one assistant line per content block of an API message sharing its id and usage, sidechain
lines of a sub-agent) and the conversation of a proposer shot: read the profile, ask a
sub-agent, edit, commit, report. Transcript-level planted cases (an image-only session, an
empty first thinking block, a `<synthetic>` API-error message, usage written as it streamed, a
sub-agent in a file of its own, lines written twice) are drawn here; where the files go is the
plan's (`RoundPlan.transcript_path`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rollout_assets.demo.ids import digest, uuid_of
from rollout_assets.demo.leaks import round_leaks
from rollout_assets.demo.plan import RoundPlan, Shot
from rollout_assets.demo.world import (
    CLAUDE_CODE_VERSION,
    EPOCH,
    NON_ASCII_SAMPLE,
    PROPOSER_MODEL,
    SYNTHETIC_MODEL,
    iso,
)

# Claude Code 1.0.x wrote the block lines of an API message as the response streamed
# (docs/input-formats.md §5, Usage); 2.1.x writes a sub-agent's lines to
# `<session id>/subagents/agent-<agentId>.jsonl` (§5, Sub-agent conversations).
STREAMING_VERSION = "1.0.58"
SUBAGENTS_FOLDER_VERSION = "2.1.9"


def last_timestamp_ms(lines: list[dict[str, Any]]) -> int:
    """When a transcript ends: the epoch ms of its latest time stamp."""
    stamps = [line["timestamp"] for line in lines if "timestamp" in line]
    # The latest, not the last: a line written again at the end keeps its earlier time.
    moment = datetime.strptime(max(stamps), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(milliseconds=1)


class _TranscriptBuilder:
    """Lines of one Claude Code session file, chained by uuid/parentUuid like the real thing."""

    def __init__(
        self,
        session_id: str,
        cwd: str,
        branch: str,
        t: int,
        rng: random.Random,
        *,
        seed: str | None = None,
        version: str = CLAUDE_CODE_VERSION,
        agent_id: str | None = None,
    ):
        self.session_id = session_id
        self.cwd = cwd
        self.branch = branch
        self.t = t
        self.rng = rng
        self.seed = session_id if seed is None else seed  # of its uuids and ids: one per file
        self.version = version
        self.agent_id = agent_id  # a sub-agent's own file: every line names its agentId
        self.streamed = version == STREAMING_VERSION
        self.lines: list[dict[str, Any]] = []
        self._parent: str | None = None
        self._count = 0

    def _base(self, kind: str, sidechain: bool) -> dict[str, Any]:
        self._count += 1
        uuid = uuid_of(self.seed, self._count)
        line = {
            "parentUuid": self._parent,
            "isSidechain": sidechain,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": self.version,
            "gitBranch": self.branch,
            "type": kind,
            "uuid": uuid,
            "timestamp": iso(self.t),
        }
        self._parent = uuid
        self.t += self.rng.randint(800, 20_000)
        return line

    def raw(self, line: dict[str, Any]) -> None:
        self.lines.append(line)

    def user(self, content: Any, sidechain: bool = False, **extra: Any) -> None:
        line = self._base("user", sidechain)
        line["message"] = {"role": "user", "content": content}
        line.update(extra)
        self.lines.append(line)

    def assistant(
        self, blocks: list[dict[str, Any]], model: str = PROPOSER_MODEL, sidechain: bool = False, **extra: Any
    ) -> None:
        """One API message, written as one line per content block sharing id and usage."""
        self._count += 1
        message_id = "msg_01" + digest(self.seed, "msg", self._count)[:22]
        request_id = "req_011C" + digest(self.seed, "req", self._count)[:20]
        usage = {
            "input_tokens": self.rng.randint(3, 4_000),
            "output_tokens": self.rng.randint(20, 2_500),
            "cache_read_input_tokens": self.rng.randint(0, 60_000),
            "cache_creation_input_tokens": self.rng.randint(0, 9_000),
            "service_tier": "standard",
        }
        if model == SYNTHETIC_MODEL:
            usage = {key: 0 for key in usage if key != "service_tier"}
        for number, block in enumerate(blocks):
            line = self._base("assistant", sidechain)
            line["message"] = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": self._usage_so_far(usage, number, len(blocks)),
            }
            line["requestId"] = request_id
            line.update(extra)
            self.lines.append(line)

    def _usage_so_far(self, usage: dict[str, Any], number: int, blocks: int) -> dict[str, Any]:
        """The usage on block line `number` of `blocks`: the final one, except when streamed
        (1.0.x), where a line before the last carries the output tokens so far, growing from 1
        (the input and cache counts repeat)."""
        if not self.streamed or number == blocks - 1:
            return usage
        final = usage["output_tokens"]
        return {**usage, "output_tokens": 1 + (final - 1) * number // (blocks - 1)}

    def tool_id(self, name: str) -> str:
        return "toolu_01" + digest(self.seed, "tool", name, len(self.lines))[:22]


def _thinking(text: str, session_id: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": "Eu" + digest(session_id, text)[:54]}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_use(tool_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def _tool_result(tool_id: str, content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user line's content answering one tool call; `content` is a string or text blocks."""
    return [{"tool_use_id": tool_id, "type": "tool_result", "content": content}]


# A 1x1 PNG: what Claude Code stores when a screenshot is pasted.
_TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@dataclass
class ProposerSession:
    """The lines of a proposer's session file, and those of its Task sub-agent's own file when
    they are written apart from it (Claude Code 2.x: `agent-<agentId>.jsonl`), else none."""

    lines: list[dict[str, Any]]
    agent_lines: list[dict[str, Any]] = field(default_factory=list)


def proposer_transcript(
    plan: RoundPlan,
    shot: Shot,
    session_id: str,
    start_ms: int,
    prompt: str,
    rng: random.Random,
    variant: str = "main",
    agent_id: str | None = None,
) -> ProposerSession:
    """A proposer session file: summary and queue lines, then the conversation. With `agent_id`,
    the sub-agent's lines go to its own file's lines (`agentId`, the session's `sessionId`)."""
    worktree = str(plan.worktree(shot))
    planted = shot.cases if variant == "main" else set()
    version = CLAUDE_CODE_VERSION
    if "streamed-usage" in planted:
        version = STREAMING_VERSION
    elif "subagents-folder" in planted:
        version = SUBAGENTS_FOLDER_VERSION
    builder = _TranscriptBuilder(session_id, worktree, shot.candidate_id, start_ms, rng, version=version)
    agent = None
    if agent_id is not None:
        seed = f"{session_id}/agent-{agent_id}"
        agent = _TranscriptBuilder(
            session_id, worktree, shot.candidate_id, start_ms, rng, seed=seed, version=version, agent_id=agent_id
        )
    summary = f"Propose {shot.candidate_id} supervisor change"
    builder.raw({"type": "summary", "summary": summary, "leafUuid": uuid_of(session_id, "leaf")})
    builder.raw(
        {
            "type": "queue-operation",
            "operation": "enqueue",
            "timestamp": iso(start_ms - 1_500),
            "sessionId": session_id,
            "content": prompt,
        }
    )
    if "empty-claude-transcript" in planted:
        # A pasted screenshot, then the session was closed before any reply.
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _TINY_PNG}}
        builder.user([image])
        return ProposerSession(builder.lines)
    builder.user(prompt)
    _proposer_turns(builder, plan, shot, planted, agent)
    if "synthetic-model" in planted:
        # Claude Code makes this message up itself when the API call fails.
        overloaded = 'API Error: 529 {"type":"error","error":{"type":"overloaded_error"}}'
        builder.assistant([_text(overloaded)], model=SYNTHETIC_MODEL, isApiErrorMessage=True)
    if "repeated-transcript-lines" in planted:
        builder.lines += _reopened_tail(builder.lines)
    return ProposerSession(builder.lines, agent.lines if agent is not None else [])


def _reopened_tail(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session's last main-thread user line and last assistant line, again: the same uuids
    and time stamps. Claude Code appends lines it already wrote to the session file when VS Code
    reopens the session (anthropics/claude-code#56196)."""
    talk = [line for line in lines if line["type"] in ("user", "assistant") and not line["isSidechain"]]
    last_user = next(line for line in reversed(talk) if line["type"] == "user")
    last_assistant = next(line for line in reversed(talk) if line["type"] == "assistant")
    return [dict(last_user), dict(last_assistant)]


def _proposer_turns(
    builder: _TranscriptBuilder,
    plan: RoundPlan,
    shot: Shot,
    planted: set[str],
    agent: _TranscriptBuilder | None = None,
) -> None:
    """Read the profile, ask a sub-agent, edit, commit, report: one API message per call."""
    session_id = builder.session_id
    profile = f"{builder.cwd}/profiles/swe/supervisor.md"
    first_thought = "The baseline loses instances where workers patch before reproducing. Read the profile."
    if "empty-thinking-first-block" in planted:
        first_thought = ""  # Claude Code writes redacted/empty thinking as its own line
    read_id = builder.tool_id("Read")
    builder.assistant(
        [
            _thinking(first_thought, session_id),
            _text("I'll start by reading the current supervisor profile."),
            _tool_use(read_id, "Read", {"file_path": profile}),
        ]
    )
    profile_text = (
        "     1\t# Supervisor\n     2\t## Splitting work\n     3\tSpawn one worker per failing test.\n"
    )
    file_info = {"type": "text", "file": {"filePath": profile, "numLines": 3}}
    builder.user(_tool_result(read_id, profile_text), toolUseResult=file_info)
    if "planted_secrets" in planted:
        _leaking_turns(builder, plan)

    _task_call(builder, agent)

    edit_id = builder.tool_id("Edit")
    edit_input = {
        "file_path": profile,
        "old_string": "Spawn one worker per failing test.",
        "new_string": "Spawn one worker to reproduce the failure first.",
    }
    thought = "Make reproduction a hard prerequisite for spawning fixers."
    builder.assistant([_thinking(thought, session_id), _tool_use(edit_id, "Edit", edit_input)])
    builder.user(_tool_result(edit_id, f"The file {profile} has been updated."))

    bash_id = builder.tool_id("Bash")
    message = "supervisor: reproduce before fixing"
    builder.assistant([_tool_use(bash_id, "Bash", {"command": f"git commit -am '{message}'"})])
    commit = plan.campaign_of(shot.generation, shot.candidate_index).commit
    committed = (
        f"[{shot.candidate_id} {commit[:7]}] {message}\n 1 file changed, 2 insertions(+), 1 deletion(-)"
    )
    builder.user(_tool_result(bash_id, [_text(committed)]))
    builder.assistant([_text(f"Committed the candidate change ({NON_ASCII_SAMPLE}): {message}.")])


def _task_call(builder: _TranscriptBuilder, agent: _TranscriptBuilder | None) -> None:
    """Ask a sub-agent (the Task tool): the call, the sub-agent's conversation, its result."""
    task_id = builder.tool_id("Task")
    task_prompt = "Summarise which baseline cells failed and why, from improve-run/baseline."
    task_input = {
        "description": "Survey baseline failures",
        "prompt": task_prompt,
        "subagent_type": "general-purpose",
    }
    builder.assistant([_tool_use(task_id, "Task", task_input)])
    finding = "Two of three failures patched before reproducing the bug."
    _sub_agent(builder, agent, task_prompt, finding)
    builder.user(_tool_result(task_id, [_text(finding)]))


def _sub_agent(builder: _TranscriptBuilder, agent: _TranscriptBuilder | None, prompt: str, finding: str) -> None:
    """The Task sub-agent's conversation: inline sidechain lines of the session (1.0.x), or the
    lines of its own file (`agent`, 2.x), its first line's parentUuid null, each with its agentId."""
    if agent is None:
        builder.user(prompt, sidechain=True)
        builder.assistant([_text(finding)], sidechain=True)
        return
    agent.t = builder.t
    agent.user(prompt, sidechain=True, agentId=agent.agent_id)
    agent.assistant([_text(finding)], sidechain=True, agentId=agent.agent_id)
    builder.t = agent.t


def opening_line(
    plan: RoundPlan, shot: Shot, session_id: str, start_ms: int, prompt: str, rng: random.Random
) -> dict[str, Any]:
    """The first line of a session file: the user's prompt."""
    builder = _TranscriptBuilder(session_id, str(plan.worktree(shot)), shot.candidate_id, start_ms, rng)
    builder.user(prompt)
    return builder.lines[0]


def sidechain_only_lines(
    plan: RoundPlan, shot: Shot, file_stem: str, start_ms: int, rng: random.Random
) -> list[dict[str, Any]]:
    """A sub-agent's own file: every line is a sidechain line (Claude Code's agent-<id>.jsonl)."""
    parent_session = plan.transcript_path(shot).stem
    builder = _TranscriptBuilder(parent_session, str(plan.worktree(shot)), shot.candidate_id, start_ms, rng)
    agent_id = file_stem.removeprefix("agent-")
    builder.user(
        "Survey the baseline failures and report the common cause.", sidechain=True, agentId=agent_id
    )
    builder.assistant(
        [{"type": "text", "text": "Most failures skip reproduction."}], sidechain=True, agentId=agent_id
    )
    return builder.lines


def _leaking_turns(builder: _TranscriptBuilder, plan: RoundPlan) -> None:
    """A proposer's detour that leaks the round's secrets (leaks.py): a call and its result
    each. Their times and token counts come from the leaks' own stream, so the round's later
    values stay as they were."""
    leaks = round_leaks(plan.spec)
    main_rng, builder.rng = builder.rng, leaks.rng()
    for call in leaks.proposer_calls(builder.cwd):
        call_id = builder.tool_id(call.tool)
        builder.assistant([_text(call.note), _tool_use(call_id, call.tool, call.input)])
        builder.user(_tool_result(call_id, call.output))
    builder.rng = main_rng
