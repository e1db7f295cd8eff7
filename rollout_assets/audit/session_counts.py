"""The audit's own count of the chat messages a session's rows make: one pass over the message
rows and one over the part rows of a run of the claimed sessions, or of a run of message ids
(`session_counts`, run by store_counts.py, a run per process), each row's JSON parsed once,
the tallies kept per session only, and only until they are handed on.

Counted by opencode's rules for what it hands the model (docs/input-formats.md §4), written
out here as row predicates, not taken from the reader:

- a message row counts only when its data is a JSON object whose role is user or assistant;
  a part row only when its data is a JSON object; a message without such a part adds nothing;
- a user message adds one message when it has a text part (a string text, not marked
  `ignored: true`), a file part not already text (a mime other than text/plain and
  application/x-directory), a compaction or a subtask part;
- an assistant message whose `error` is set (not null, false, 0, "", [] or {}) adds nothing,
  unless the error is an object named MessageAbortedError and it has a part other than
  step-start and reasoning;
- a sent assistant message is cut into steps at each step-start part (parts in id order); a
  step adds one message when its text parts join to a non-empty text (a non-empty text, or two
  texts or more: the newline between them), or it has a non-empty reasoning text or a tool
  part with a string callID; and one tool message per such tool part;
- a session whose count is not 0 adds the system message when one of its assistant messages
  records a non-empty `system`: a non-empty string, or a list whose strings join to a
  non-empty text.

The pass also gives, for the gap proofs of "has no readable message parts", the session's
message rows and the part rows that make a message by a narrower rule that holds under any
reading of the docs: a non-empty text (not ignored), or in an assistant message a non-empty
reasoning text or a tool call with a call id.

And, for the usage proofs, the spend its assistant messages record (docs/input-formats.md §4:
every assistant message, sent or not, with or without parts): `cost`, `tokens.input`,
`tokens.output`, `tokens.reasoning`, `tokens.cache.read` and `tokens.cache.write`, each summed
over the messages that record it as a number, with the sum of their absolute values
(audit/usage.py compares a sum holding a float within the rounding that bounds). Only for the
sessions whose row records no spend (store_counts.py, `unmeasured`): a worker line takes its
messages' spend only then.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from itertools import chain
from typing import Any

import orjson

from rollout_assets.audit.strict_json import any_depth_json

# Row order: messages by id, parts by their message's id and then their own, so the two streams
# are walked side by side and no message of the round is held beyond the one being counted.
#
# Two plans give the same rows. When the wanted sessions are a small share of the store, their
# messages are found by the session index and sorted (`None` for a span). When they are most of
# it, the messages are read in the order of the id index, no sort, the `+` keeping the planner
# off the session index (it drops only the column's affinity, which the claimed ids, of no
# affinity, do not need, and keeps its collation); a span (lower, upper) then bounds them to
# the ids from the lower-th to before the upper-th (None: no bound), so processes can each
# read their own run of the store. A NULL id sorts first and is in no range:
# the first span reads those apart (no part row is ever of them: NULL is IN no set).
_NTH_ID = "(SELECT id FROM message WHERE id IS NOT NULL ORDER BY id LIMIT 1 OFFSET :{})"
Span = tuple[int | None, int | None] | None
# A run of the claimed sessions, (first, after): those from `first` to before `after` in their
# table's order (None: no bound).
Sessions = tuple[str | None, str | None]


def _wanted(sessions: Sessions) -> str:
    """The claimed sessions of the run `sessions`, from the claims file attached as `claims`
    (store_counts.py): a table of ids without affinity, so they compare with the message rows'
    session ids as they are stored (TEXT equals only TEXT)."""
    first, after = sessions
    bounds = [
        bound
        for given, bound in ((first, "session_id >= :first"), (after, "session_id < :after"))
        if given is not None
    ]
    where = f" WHERE {' AND '.join(bounds)}" if bounds else ""
    return f"(SELECT session_id FROM claims.claimed{where})"


# A message row: its session, id and data, and whether its session's spend is summed from its
# messages (its row records none).
_MESSAGE = "SELECT session_id, id, data, session_id IN (SELECT session_id FROM claims.unmeasured) FROM message"


def _queries(span: Span, sessions: Sessions) -> tuple[str, ...]:
    """The SQL of the message rows (those with a NULL id first, when the span reads them apart)
    and of the part rows of `span`'s wanted sessions."""
    wanted = _wanted(sessions)
    parts = "SELECT message_id, data FROM part WHERE message_id IN (SELECT id FROM message WHERE {}) ORDER BY message_id, id"
    if span is None:
        where = f"session_id IN {wanted}"
        return (f"{_MESSAGE} WHERE {where} ORDER BY id", parts.format(where))
    lower, upper = span
    bounds = f"id >= {_NTH_ID.format('lower')} AND " if lower is not None else ""
    bounds += f"id < {_NTH_ID.format('upper')} AND " if upper is not None else ""
    messages = f"{_MESSAGE} WHERE {bounds}+session_id IN {wanted} ORDER BY id"
    if lower is None and upper is not None:
        nulls = f"{_MESSAGE} WHERE id IS NULL AND +session_id IN {wanted}"
        return (nulls, messages, parts.format(f"{bounds}+session_id IN {wanted}"))
    return (messages, parts.format(f"{bounds}+session_id IN {wanted}"))


_NOT_SENT_AS_FILES = ("text/plain", "application/x-directory")
_NO_MESSAGE = object()  # a message id equal to none

# A session's tally, a list for speed: its message rows, whether an assistant message records a
# non-empty system prompt, its part rows that make a message by the narrow rule, and the chat
# messages its rows make before the system message; then the spend of its assistant messages,
# each field's sum (None: no message records it) and the sum of its absolute values, in the
# order of SPEND.
ROWS, SYSTEM, NARROW, MADE = range(4)
SPEND = ("usd", "tokens_in", "tokens_out", "tokens_reasoning", "cache_read", "cache_write")
SPENT = 4  # the index of the first spend sum; its absolute sum follows it, and so on
Tally = list[Any]


def new_tally() -> Tally:
    return [0, False, 0, 0, *([None, 0] * len(SPEND))]


def _object(data: Any) -> dict[str, Any] | None:
    """A message row's JSON object: orjson, else the audit's reading of what orjson refuses
    (invalid UTF-8, a number beyond a double), as the inputs are read."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            value = any_depth_json(data)
        except ValueError:
            return None
    except TypeError:
        return None
    return value if isinstance(value, dict) else None


_NONE: dict[str, Any] = {}
_NUMBER = (int, float)  # a JSON number's types: a bool is none


def _add_spend(message: dict[str, Any], tally: Tally) -> None:
    """The spend an assistant message records, added to its session's tally."""
    tokens = message.get("tokens")
    if type(tokens) is not dict:
        tokens = _NONE
    cache = tokens.get("cache")
    if type(cache) is not dict:
        cache = _NONE
    at = SPENT
    for value in (
        message.get("cost"),
        tokens.get("input"),
        tokens.get("output"),
        tokens.get("reasoning"),
        cache.get("read"),
        cache.get("write"),
    ):
        if type(value) in _NUMBER:
            total = tally[at]
            tally[at] = value if total is None else total + value
            tally[at + 1] += abs(value)
        at += 2


def _error_set(error: Any) -> bool:
    """Set: present and not null, false, 0, "", [] or {}."""
    if error is None or error is False:
        return False
    if isinstance(error, int | float) and not isinstance(error, bool) and error == 0:
        return False
    return error not in ("", [], {})


def _system(system: Any) -> bool:
    if isinstance(system, str):
        return system != ""
    if isinstance(system, list):
        texts = [item for item in system if isinstance(item, str)]
        return len(texts) >= 2 or any(texts)
    return False


# How a message's parts are counted: not at all (no chat message), as a user's, as a sent
# assistant's, or as an errored assistant's (counted only when aborted with a part other than
# step-start and reasoning).
_SKIP, _USER, _ASSISTANT, _ERRORED, _ABORTED = range(5)


def _message(data: Any, tally: Tally, unmeasured: int) -> int:
    """How the parts of the message row `data` are counted; notes a system prompt on `tally`,
    and the message's spend when its session's row records none (`unmeasured`)."""
    message = _object(data)
    if message is None:
        return _SKIP
    role = message.get("role")
    if role == "user":
        return _USER
    if role != "assistant":
        return _SKIP
    if not tally[SYSTEM] and _system(message.get("system")):
        tally[SYSTEM] = True
    if unmeasured:
        _add_spend(message, tally)
    error = message.get("error")
    if not _error_set(error):
        return _ASSISTANT
    return _ABORTED if isinstance(error, dict) and error.get("name") == "MessageAbortedError" else _ERRORED


def _read_to(
    messages: Iterator[Any], sessions: dict[Any, Tally], message_id: Any
) -> tuple[Tally | None, int]:
    """Tallies the message rows up to the one of `message_id` (messages without parts are passed
    over); (the tally of its session, how its parts are counted), (None, _SKIP) when the rows
    end first or its parts are not counted."""
    for session_id, candidate_id, data, unmeasured in messages:
        tally = sessions.get(session_id)
        if tally is None:
            tally = sessions[session_id] = new_tally()
        tally[ROWS] += 1
        how = _message(data, tally, unmeasured)
        if candidate_id == message_id:
            return (None if how == _SKIP else tally), how
    return None, _SKIP


# Each of the three walks the part rows of one message, from its first, `first`, and returns
# the first row of the next message (None: there is none); a loop each, its state in local
# variables, since it runs for every part row of the round.


def _passed_over(rows: Iterator[Any], first: Any) -> Any:
    group = first[0]
    for row in rows:
        if row[0] != group:
            return row
    return None


def _user_parts(rows: Iterator[Any], first: Any, tally: Tally) -> Any:
    loads, decode_error, sent_as_text = orjson.loads, orjson.JSONDecodeError, _NOT_SENT_AS_FILES
    group, following = first[0], None
    made = narrow = 0
    for row in chain((first,), rows):
        message_id, data = row
        if message_id != group:
            following = row
            break
        try:
            part = loads(data)
        except (decode_error, TypeError):
            continue
        if type(part) is not dict:
            continue
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if type(text) is str and part.get("ignored") is not True:
                made = 1
                if text:
                    narrow += 1
        elif kind == "file":
            mime = part.get("mime")
            if mime is None or mime not in sent_as_text:
                made = 1
        elif kind == "compaction" or kind == "subtask":
            made = 1
    tally[NARROW] += narrow
    tally[MADE] += made
    return following


def _assistant_parts(rows: Iterator[Any], first: Any, tally: Tally, how: int) -> Any:
    """Steps start at each step-start part; a step that speaks is one message, and each tool
    call with a call id one more (its tool result). A step is closed at the next step-start or
    at the message's end."""
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    group, following = first[0], None
    made = narrow = calls = texts = 0
    speaks = other = False
    for row in chain((first,), rows):
        message_id, data = row
        if message_id != group:
            following = row
            break
        try:
            part = loads(data)
        except (decode_error, TypeError):
            continue
        if type(part) is not dict:
            continue
        kind = part.get("type")
        if kind == "step-start":
            made += (speaks or texts >= 2 or calls > 0) + calls
            speaks, texts, calls = False, 0, 0
            continue
        if kind == "reasoning":
            text = part.get("text")
            if type(text) is str and text:
                speaks = True
                narrow += 1
            continue
        other = True
        if kind == "text":
            text = part.get("text")
            if type(text) is str:
                texts += 1
                if text:
                    speaks = True
                    if part.get("ignored") is not True:
                        narrow += 1
        elif kind == "tool" and type(part.get("callID")) is str:
            calls += 1
            narrow += 1
    made += (speaks or texts >= 2 or calls > 0) + calls
    tally[NARROW] += narrow
    if how == _ASSISTANT or (how == _ABORTED and other):
        tally[MADE] += made
    return following


# Sessions whose tallies one process holds before it hands them to `flush`: the tallies of a
# round's sessions would otherwise grow with the round.
FLUSH_AT = 2_048


def session_counts(
    connection: sqlite3.Connection,
    flush: Callable[[dict[Any, Tally]], None],
    span: Span = None,
    sessions: Sessions = (None, None),
) -> None:
    """The tallies (ROWS, SYSTEM, NARROW, MADE, then the spend) of the claimed sessions of the
    run `sessions` (the claims file attached to `connection` as `claims`) that have message rows
    in `span` (see _queries), handed to `flush` a few thousand sessions at a time: one session's
    tallies of several flushes, or of disjoint spans, add up (SYSTEM: or; a spend sum: None adds
    nothing), and `made` adds the system message when MADE is not 0 and SYSTEM is set.

    The part rows are walked message by message, the parts of one counted as they come, and
    the message rows read up to each one's message."""
    tallies: dict[Any, Tally] = {}
    *message_queries, part_query = _queries(span, sessions)
    lower, upper = span if span is not None else (None, None)
    parameters = {"lower": lower, "upper": upper, "first": sessions[0], "after": sessions[1]}
    messages = chain.from_iterable(connection.execute(query, parameters) for query in message_queries)
    rows = connection.execute(part_query, parameters)
    row = next(rows, None)
    while row is not None:
        tally, how = _read_to(messages, tallies, row[0])
        if tally is None:
            row = _passed_over(rows, row)
        elif how == _USER:
            row = _user_parts(rows, row, tally)
        else:
            row = _assistant_parts(rows, row, tally, how)
        if len(tallies) >= FLUSH_AT:  # no tally is in use between two messages
            flush(tallies)
            tallies.clear()
    _read_to(messages, tallies, _NO_MESSAGE)  # the rows of messages after the last one with parts
    flush(tallies)
