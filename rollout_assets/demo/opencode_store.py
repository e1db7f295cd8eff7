"""The opencode store: its schema and the session, message and part rows of worker sessions.

OWNS the `session`/`message`/`part` tables (current schema, or the legacy one without the cost
and token columns), the sortable row ids, and the shape of a worker session: a user prompt, then
assistant messages of steps (reasoning, text, one tool call, step-finish, patch or snapshot),
with their token counts and costs. What the parts say is worker_text.py's; a session's planted
defects come as a `SessionShape` (planted.py), and the one that cuts a written session down to
one answer is session_edits.py's.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_assets.demo.files import compact
from rollout_assets.demo.ids import digest
from rollout_assets.demo.leaks import RoundLeaks
from rollout_assets.demo.plan import Cell
from rollout_assets.demo.planted import SessionShape
from rollout_assets.demo.session_edits import cut_to_one_answer
from rollout_assets.demo.worker_text import (
    PLUGIN_STATUS_TEXT,
    TOOLS,
    answer_text,
    attached_file_parts,
    second_tool_call,
    system_prompt,
    tool_call,
    worker_prompt,
)
from rollout_assets.demo.world import WORKER_MODELS

# How far ahead of the opencode server's clock the client that named the prompt ran: the
# client's id (`PromptInput.messageID`) sorts after the server's later assistant messages.
_CLIENT_CLOCK_AHEAD_MS = 90_000

_COST_COLUMNS = (
    "cost",
    "tokens_input",
    "tokens_output",
    "tokens_reasoning",
    "tokens_cache_read",
    "tokens_cache_write",
)


def check_store_schema(db_path: Path, legacy: bool) -> None:
    """An existing store keeps its schema: appending the other one would mix two stores."""
    if not db_path.exists():
        return
    connection = sqlite3.connect(db_path)
    try:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(session)")}
    finally:
        connection.close()
    if not columns:
        return
    has_cost = "cost" in columns
    if has_cost == legacy:
        wanted = "legacy (no cost/token columns)" if legacy else "current"
        raise ValueError(f"opencode store {db_path} has the other schema; cannot append the {wanted} one")


def create_store_schema(connection: sqlite3.Connection, legacy: bool) -> None:
    cost_columns = (
        ""
        if legacy
        else "".join(f", {name} {'REAL' if name == 'cost' else 'INTEGER'}" for name in _COST_COLUMNS)
    )
    connection.executescript(
        f"""
        CREATE TABLE IF NOT EXISTS session (
            id TEXT PRIMARY KEY, parent_id TEXT, directory TEXT NOT NULL, agent TEXT, model TEXT
            {cost_columns}, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, title TEXT
        );
        CREATE TABLE IF NOT EXISTS message (
            id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_created INTEGER NOT NULL, data TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS part (
            id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,
            time_created INTEGER NOT NULL, data TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS message_session_id_idx ON message (session_id);
        CREATE INDEX IF NOT EXISTS part_message_id_idx ON part (message_id);
        """
    )


class IdSequence:
    """Sortable ids: prefix, 12 hex digits of epoch ms, a zero-padded counter, the round tag.

    Time leads, so `ORDER BY id` is chronological; the counter breaks ties in creation order.
    """

    def __init__(self, round_tag: str):
        self._tag = round_tag
        self._count = 0

    def next(self, prefix: str, time_ms: int) -> str:
        self._count += 1
        return f"{prefix}_{time_ms:012x}{self._count:08d}{self._tag}"


@dataclass
class _Tokens:
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0

    def add(self, other: _Tokens) -> None:
        self.input += other.input
        self.output += other.output
        self.reasoning += other.reasoning
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.cost += other.cost

    def as_json(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "reasoning": self.reasoning,
            "cache": {"read": self.cache_read, "write": self.cache_write},
        }


class SessionWriter:
    """Buffers the opencode rows of one round and flushes them with `executemany`.

    The caller holds the transaction (one per round); the buffers keep memory flat however
    large the round is.
    """

    _FLUSH_AT = 20_000

    def __init__(
        self,
        connection: sqlite3.Connection,
        legacy: bool,
        ids: IdSequence,
        rng: random.Random,
        steps_per_session: int,
        leaks: RoundLeaks | None = None,
    ):
        self._connection = connection
        self._leaks = leaks  # what a session of the planted_secrets case leaks
        self._steps_per_session = steps_per_session
        self._legacy = legacy
        self._ids = ids
        self._rng = rng
        self._sessions: list[tuple[Any, ...]] = []
        self._messages: list[tuple[Any, ...]] = []
        self._parts: list[tuple[Any, ...]] = []
        columns = ["id", "parent_id", "directory", "agent", "model"]
        columns += [] if legacy else list(_COST_COLUMNS)
        columns += ["time_created", "time_updated", "title"]
        marks = ", ".join("?" for _ in columns)
        self._session_sql = f"INSERT INTO session ({', '.join(columns)}) VALUES ({marks})"

    def flush(self) -> None:
        # Rows in id order fill each primary-key page once instead of revisiting it.
        for rows in (self._sessions, self._messages, self._parts):
            rows.sort()
        self._connection.executemany(self._session_sql, self._sessions)
        self._connection.executemany("INSERT INTO message VALUES (?, ?, ?, ?)", self._messages)
        self._connection.executemany("INSERT INTO part VALUES (?, ?, ?, ?, ?)", self._parts)
        self._sessions.clear()
        self._messages.clear()
        self._parts.clear()

    # -- one session -----------------------------------------------------------------

    def add_session(
        self, cell: Cell, worker: int, cwd: str, start_ms: int, shape: SessionShape, parent_id: str | None = None
    ) -> str:
        rng = self._rng
        model_id, provider_id = WORKER_MODELS[0] if rng.random() < 0.8 else WORKER_MODELS[1]
        session_id = self._ids.next("ses", start_ms)
        totals = _Tokens()
        t = start_ms + rng.randint(5, 40)
        if shape.only_malformed_messages:
            t = self._malformed_messages(session_id, t)
        elif not shape.no_messages:
            t = self._conversation(session_id, cell, worker, cwd, t, shape, (model_id, provider_id), totals)
            if shape.answer_only:
                spend = cut_to_one_answer(self._messages, self._parts, session_id, answer_text(cell))
                totals = _tokens_of(spend["cost"], spend["tokens"])
        end_ms = t + rng.randint(40, 900)
        if shape.half_second_wall:
            # A wall time of n.5 s: JavaScript's Math.round goes up, Python's round() goes to even.
            end_ms = start_ms + ((end_ms - start_ms) // 1000 + 1) * 1000 + 500
        title = f"{cell.scenario_id}: " + ("explore the test layout" if parent_id else "worker task")
        row: list[Any] = [session_id, parent_id, cwd, "general" if parent_id else "build"]
        row.append(compact({"id": model_id, "providerID": provider_id}))
        if not self._legacy:
            row += [round(totals.cost, 6), totals.input, totals.output, totals.reasoning]
            row += [totals.cache_read, totals.cache_write]
        row += [start_ms, end_ms, title]
        self._sessions.append(tuple(row))
        if len(self._parts) >= self._FLUSH_AT:
            self.flush()
        return session_id

    def _message(self, session_id: str, t: int, data: str, id_ms: int | None = None) -> str:
        """A message row at `t`, its id made at `id_ms` (by default `t`)."""
        message_id = self._ids.next("msg", t if id_ms is None else id_ms)
        self._messages.append((message_id, session_id, t, data))
        return message_id

    def _part(self, session_id: str, message_id: str, t: int, data: str) -> None:
        self._parts.append((self._ids.next("prt", t), message_id, session_id, t, data))

    def _malformed_messages(self, session_id: str, t: int) -> int:
        """Two messages whose data was cut mid-write; their parts are intact but unreachable."""
        for role in ("user", "assistant"):
            message_id = self._message(session_id, t, '{"role":"' + role + '","time":{"created":' + str(t))
            self._part(session_id, message_id, t + 3, compact({"type": "text", "text": "orphaned part"}))
            t += self._rng.randint(2_000, 9_000)
        return t

    def _conversation(
        self,
        session_id: str,
        cell: Cell,
        worker: int,
        cwd: str,
        t: int,
        shape: SessionShape,
        model: tuple[str, str],
        totals: _Tokens,
    ) -> int:
        rng = self._rng
        # opencode stamps `time.created` with the server's clock but keeps an id the client chose
        # (`id: input.messageID ?? Identifier.ascending("message")` in createUserMessage,
        # packages/opencode/src/session/prompt.ts): a client clock ahead makes the ids disagree.
        id_ms = t + _CLIENT_CLOCK_AHEAD_MS if shape.client_message_id else None
        user_id = self._message(session_id, t, _user_message(t), id_ms)
        subtask = worker if shape.subtask is None else shape.subtask
        prompt = worker_prompt(cell, cwd, subtask)
        self._part(session_id, user_id, t + 1, compact({"type": "text", "text": prompt}))
        context = f"<context>\nrepository clone: {cwd}\nfile under suspicion: {cell.touched_file}\n</context>"
        self._part(session_id, user_id, t + 2, compact({"type": "text", "text": context, "synthetic": True}))
        if shape.ignored_parts:
            for k, part in enumerate(attached_file_parts(cell, cwd)):
                self._part(session_id, user_id, t + 3 + k, compact(part))
        t += rng.randint(300, 2_000)
        if shape.malformed_message:
            self._message(session_id, t, '{"role":"assistant","time":{"created":' + str(t) + ',"compl')
            t += rng.randint(200, 900)
        steps = self._steps_per_session
        step = 0
        while step < steps:
            in_message = min(steps - step, 1 if rng.random() < 0.6 else 2)
            t = self._assistant_message(
                session_id, user_id, cell, cwd, t, shape, model, totals, step, in_message, steps
            )
            step += in_message
        if shape.ignored_parts:
            # A plugin's status message after the answer: a user message of one ignored text part.
            status_id = self._message(session_id, t, _user_message(t))
            status = {"type": "text", "text": PLUGIN_STATUS_TEXT, "ignored": True}
            self._part(session_id, status_id, t + 1, compact(status))
            t += 2
        return t

    def _assistant_message(
        self,
        session_id: str,
        parent_id: str,
        cell: Cell,
        cwd: str,
        t: int,
        shape: SessionShape,
        model: tuple[str, str],
        totals: _Tokens,
        first_step: int,
        step_count: int,
        total_steps: int,
    ) -> int:
        """One assistant message holding `step_count` steps; its data row is written last."""
        rng = self._rng
        created = t
        message_id = self._ids.next("msg", created)
        used = _Tokens()
        finish = "tool-calls"
        for step in range(first_step, first_step + step_count):
            last = step == total_steps - 1
            t, step_tokens = self._step(session_id, message_id, cell, cwd, t, shape, step, last)
            used.add(step_tokens)
            finish = "stop" if last else "tool-calls"
        totals.add(used)
        data: dict[str, Any] = {"role": "assistant", "time": {"created": created, "completed": t}}
        if shape.system_prompt:
            # Older opencode kept the system messages it sent on every assistant message
            # (`system: z.string().array()` on Assistant, packages/opencode/src/session/message-v2.ts).
            data["system"] = system_prompt(cwd)
        data |= {
            "parentID": parent_id,
            "modelID": model[0],
            "providerID": model[1],
            "mode": "build",
            "path": {"cwd": cwd, "root": cwd},
            "cost": round(used.cost, 6),
            "tokens": used.as_json(),
            "finish": finish,
        }
        self._messages.append((message_id, session_id, created, compact(data)))
        return t + rng.randint(100, 1_500)

    def _step(
        self,
        session_id: str,
        message_id: str,
        cell: Cell,
        cwd: str,
        t: int,
        shape: SessionShape,
        step: int,
        last: bool,
    ) -> tuple[int, _Tokens]:
        rng = self._rng
        snapshot = digest(session_id, step)[:40]
        self._part(session_id, message_id, t, compact({"type": "step-start", "snapshot": snapshot}))
        t += rng.randint(400, 4_000)
        if rng.random() < 0.7:
            thought = (
                f"The failure in {cell.touched_file} looks like an unchecked empty value; step {step + 1}."
            )
            self._part(session_id, message_id, t, compact({"type": "reasoning", "text": thought}))
            t += rng.randint(200, 3_000)
        if step == 0 and shape.malformed_part:
            self._part(session_id, message_id, t, '{"type":"text","text":"I will now read the fi')
            t += 5
        if last or rng.random() < 0.4:
            text = (
                "The regression test passes now; the patch is ready." if last else "Checking the code path."
            )
            self._part(session_id, message_id, t, compact({"type": "text", "text": text}))
            t += rng.randint(100, 1_500)
        edited = False
        if not last or step == 0:
            tool = TOOLS[(step + rng.randint(0, 3)) % len(TOOLS)]
            if step == 0 and (shape.long_tool_output or shape.object_tool_output):
                tool = "bash" if shape.long_tool_output else "todowrite"
            t = self._tool_part(session_id, message_id, cell, cwd, t, tool, shape if step == 0 else None)
            if step == 0 and shape.multi_tool_step:
                # Two tool calls in one model response: opencode stores a tool part for each in the step.
                end = t + 640
                self._tool_row(session_id, message_id, t, end, "grep", second_tool_call(cell, cwd))
                t = end + 60
            edited = tool == "edit"
        tokens = _step_tokens(rng)
        finish = {
            "type": "step-finish",
            "reason": "stop" if last else "tool-calls",
            "snapshot": digest(session_id, step, "end")[:40],
            "cost": round(tokens.cost, 6),
            "tokens": tokens.as_json(),
        }
        self._part(session_id, message_id, t, compact(finish))
        if edited:
            patch = {"type": "patch", "hash": snapshot, "files": [f"{cwd}/{cell.touched_file}"]}
            self._part(session_id, message_id, t + 1, compact(patch))
        elif rng.random() < 0.2:
            self._part(session_id, message_id, t + 1, compact({"type": "snapshot", "snapshot": snapshot}))
        return t + 2, tokens

    def _tool_part(
        self,
        session_id: str,
        message_id: str,
        cell: Cell,
        cwd: str,
        t: int,
        tool: str,
        shape: SessionShape | None,
    ) -> int:
        rng = self._rng
        tool_input, output, title = tool_call(cell, cwd, tool, rng, shape)
        if shape is not None and shape.leaked_secrets and self._leaks is not None:
            # In place of the drawn call, whose values were drawn all the same: the round's later
            # values stay as they were.
            leak = self._leaks.worker_call(cell.scenario_id)
            tool, tool_input, output, title = leak.tool, leak.input, leak.output, leak.note
        end = t + rng.randint(80, 12_000)
        self._tool_row(session_id, message_id, t, end, tool, (tool_input, output, title))
        return end + rng.randint(50, 800)

    def _tool_row(
        self, session_id: str, message_id: str, t: int, end: int, tool: str, call: tuple[Any, Any, str]
    ) -> None:
        """A completed tool part of `call` = (input, output, title), run from `t` to `end`."""
        tool_input, output, title = call
        call_id = "toolu_01" + digest(session_id, message_id, t)[:22]
        state = {
            "status": "completed",
            "input": tool_input,
            "output": output,
            "title": title,
            "metadata": {"truncated": False},
            "time": {"start": t, "end": end},
        }
        self._part(
            session_id,
            message_id,
            t,
            compact({"type": "tool", "callID": call_id, "tool": tool, "state": state}),
        )


def _user_message(t: int) -> str:
    return compact({"role": "user", "time": {"created": t}, "agent": "build"})


def _tokens_of(cost: float, tokens: dict[str, Any]) -> _Tokens:
    """The spend a step-finish part records, as `_Tokens`."""
    cache = tokens["cache"]
    counts = (tokens["input"], tokens["output"], tokens["reasoning"], cache["read"], cache["write"])
    return _Tokens(*counts, cost=cost)


def _step_tokens(rng: random.Random) -> _Tokens:
    tokens = _Tokens(
        input=rng.randint(800, 9_000),
        output=rng.randint(40, 1_400),
        reasoning=rng.randint(0, 600),
        cache_read=rng.randint(0, 30_000),
        cache_write=rng.randint(0, 4_000),
    )
    tokens.cost = (
        tokens.input * 3
        + (tokens.output + tokens.reasoning) * 15
        + tokens.cache_read * 0.3
        + tokens.cache_write * 3.75
    ) / 1e6
    return tokens
