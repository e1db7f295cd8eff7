"""The training checks' own recount of the identifier normalization (docs/training.md, The
identifiers): which strings of a ledger line are its identifiers, what its transcript becomes
with them replaced, how long it then is, and whether a written row still names one.

Written apart from the export (training/identifiers.py, normalize.py, tokens.py), by another
method: the export replaces in the serialized transcript, as JSON escapes it; this module
walks the texts one by one, each as the model read it. Both follow the rules of the docs, so
where they disagree one of them is wrong, and the check fails.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

PLACEHOLDER = {
    "working_folder": "/workspace",
    "worker_name": "<WORKER>",
    "run_folder": "<RUN_DIR>",
    "session": "<SESSION>",
    "parent_session": "<PARENT_SESSION>",
}
_ORDER = list(PLACEHOLDER)  # the first kind to name a string keeps it
_PATH_PLACEHOLDERS = ("/workspace", "<RUN_DIR>")
_ESCAPE_ENDING = re.compile(r"\\(?:[ntrbf]|u[0-9A-Fa-f]{4})\Z")
_UNSAFE = re.compile(r'["\\\x00-\x1f]')
# A placeholder followed by the path below it, up to where a path in text or JSON ends.
_PLACEHOLDER_PATH = re.compile(r"(/workspace|<RUN_DIR>)((?:\\?/[^\s\"'`<>|;,:()\[\]{}\\]+)*)")

Target = tuple[str, str, str]  # (spelling, kind, placeholder spelled alike)


def identifiers_of(line: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, string) of each identifier of a ledger line, by the rules of docs/training.md."""
    metrics = line["outcome"].get("metrics") or {}
    artifacts = line.get("artifacts") or {}
    run_dir, ref = artifacts.get("run_dir"), artifacts.get("transcript_ref")
    named: list[tuple[str, Any]] = []
    if line["role"] == "worker":
        cwd = _absolute(metrics.get("worker_cwd"))
        named += [("working_folder", cwd), ("worker_name", cwd.split("/")[-1] if cwd else None)]
        named += [("run_folder", _absolute(run_dir))]
        if isinstance(ref, str) and ref[:9] == "opencode:":
            named.append(("session", ref[9:]))
        named.append(("parent_session", metrics.get("session_parent_id")))
    elif line["role"] in ("proposer", "agent"):
        named += [("working_folder", _absolute(run_dir)), ("session", _claude_session(ref))]
    elif line["role"] == "supervisor":
        named.append(("run_folder", _absolute(run_dir)))
    found: dict[str, str] = {}
    for kind, value in sorted(named, key=lambda pair: _ORDER.index(pair[0])):
        if not isinstance(value, str) or _UNSAFE.search(value) or value == PLACEHOLDER[kind] or value in found:
            continue
        if kind in ("worker_name", "session", "parent_session") and not _unlike_a_word(value):
            continue
        found[value] = kind
    return [(kind, value) for value, kind in found.items()]


def _absolute(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    while value.endswith("/"):
        value = value[:-1]
    return value if value[:1] == "/" else None


def _unlike_a_word(value: str) -> bool:
    return len(value) >= 8 and re.search(r"[0-9-]", value) is not None


def _claude_session(ref: Any) -> str | None:
    if not isinstance(ref, str) or not ref.endswith(".jsonl"):
        return None
    folder, _, file = ref.rpartition("/")
    stem = file[: -len(".jsonl")]
    if not stem.startswith("agent-"):
        return stem
    parent, _, name = folder.rpartition("/")
    return parent.rpartition("/")[2] if name == "subagents" else None


def targets_of(identifiers: list[tuple[str, str]]) -> list[Target]:
    """Each identifier as the text may hold it (plain, JSON-escaped, `/` as `\\/`), longest first."""
    targets: dict[str, tuple[str, str]] = {}
    for kind, value in identifiers:
        ascii_form = json.dumps(value)[1:-1]
        for spelling in (value, ascii_form, value.replace("/", "\\/"), ascii_form.replace("/", "\\/")):
            slashed = "\\/" in spelling
            placeholder = PLACEHOLDER[kind].replace("/", "\\/") if slashed else PLACEHOLDER[kind]
            targets.setdefault(spelling, (kind, placeholder))
    return sorted(((s, k, p) for s, (k, p) in targets.items()), key=lambda t: -len(t[0]))


def _is_name_character(character: str) -> bool:
    return character.isalnum() or character == "_" or character == "-"


def _whole(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] stands alone: not inside a longer name or path."""
    if start > 0:
        before = text[start - 1]
        if (_is_name_character(before) or before in "./~") and not _ESCAPE_ENDING.search(text[max(0, start - 6) : start]):
            return False
    if end < len(text):
        after = text[end]
        if _is_name_character(after):
            return False
        if after == "." and end + 1 < len(text) and _is_name_character(text[end + 1]):
            return False
    return True


def occurrences(text: str, targets: list[Target]) -> list[tuple[int, int, str, str]]:
    """(start, end, kind, placeholder) of each identifier replaced in `text`: from the left, the
    longest that stands alone at each place."""
    candidates = []
    for spelling, kind, placeholder in targets:
        start = text.find(spelling)
        while start >= 0:
            candidates.append((start, start + len(spelling), kind, placeholder))
            start = text.find(spelling, start + 1)
    chosen, reached = [], 0
    # Leftmost first, the longest first at one place; one inside a chosen one is not looked at.
    for start, end, kind, placeholder in sorted(candidates, key=lambda c: (c[0], c[0] - c[1])):
        if start >= reached and _whole(text, start, end):
            chosen.append((start, end, kind, placeholder))
            reached = end
    return chosen


def replaced_text(text: str, targets: list[Target], counts: Counter[str]) -> str:
    if not any(target[0] in text for target in targets):
        return text
    out, position = [], 0
    for start, end, kind, placeholder in occurrences(text, targets):
        out.append(text[position:start] + placeholder)
        position = end
        counts[kind] += 1
    return "".join(out) + text[position:]


def normalized_transcript(
    messages: list[dict[str, Any]], targets: list[Target]
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """A ledger transcript with its identifiers replaced in every content, reasoning and tool
    call's arguments; and the count of each kind replaced."""
    counts: Counter[str] = Counter()
    targets = _present(messages, targets) if targets else targets
    if not targets:
        return messages, counts
    result = []
    for message in messages:
        copy = dict(message)
        for key in ("content", "reasoning_content"):
            if isinstance(copy.get(key), str):
                copy[key] = replaced_text(copy[key], targets, counts)
        if copy.get("tool_calls"):
            calls = []
            for call in copy["tool_calls"]:
                function = dict(call["function"])
                if isinstance(function.get("arguments"), str):
                    function["arguments"] = replaced_text(function["arguments"], targets, counts)
                calls.append({**call, "function": function})
            copy["tool_calls"] = calls
        result.append(copy)
    return result, counts


def compared(
    held: list[dict[str, Any]], messages: list[dict[str, Any]], targets: list[Target]
) -> tuple[str | None, Counter[str]]:
    """(How a row's transcript differs from its ledger line's transcript with the identifiers
    replaced, or None; the replacements by kind). Message by message: role, tool_call_id and
    name as they are, every text as replaced, each tool call's id, type, name and arguments;
    a key the row has as null is one the line does not have."""
    counts: Counter[str] = Counter()
    if len(held) != len(messages):
        return f"{len(held)} messages, not {len(messages)}", counts
    targets = _present(messages, targets) if targets else targets
    for number, (row, line) in enumerate(zip(held, messages), start=1):
        for key in ("role", "tool_call_id", "name", "content", "reasoning_content"):
            expected = line.get(key)
            if targets and key in ("content", "reasoning_content") and isinstance(expected, str):
                expected = replaced_text(expected, targets, counts)
            if row.get(key) != expected:
                return f"message {number}: {key}", counts
        row_calls, line_calls = row.get("tool_calls"), line.get("tool_calls")
        if (row_calls is None) != (line_calls is None) or len(row_calls or ()) != len(line_calls or ()):
            return f"message {number}: tool_calls", counts
        for row_call, line_call in zip(row_calls or (), line_calls or ()):
            arguments = line_call["function"].get("arguments")
            if targets and isinstance(arguments, str):
                arguments = replaced_text(arguments, targets, counts)
            expected = (line_call.get("id"), line_call.get("type"), line_call["function"].get("name"), arguments)
            if (row_call["id"], row_call["type"], row_call["function"]["name"], row_call["function"]["arguments"]) != expected:
                return f"message {number}: tool call {line_call.get('id')}", counts
    return None, counts


def texts_of(messages: list[dict[str, Any]]) -> Iterator[str]:
    for message in messages:
        for key in ("content", "reasoning_content"):
            if isinstance(message.get(key), str):
                yield message[key]
        for call in message.get("tool_calls") or ():
            if isinstance(call["function"].get("arguments"), str):
                yield call["function"]["arguments"]


def _present(messages: list[dict[str, Any]], targets: list[Target]) -> list[Target]:
    """The targets found anywhere in the transcript's texts: each text is then searched for
    these only (most transcripts hold two or three of a line's spellings)."""
    everything = "\0".join(texts_of(messages))
    return [target for target in targets if target[0] in everything]


def leftover(messages: list[dict[str, Any]], targets: list[Target]) -> str | None:
    """The kind of an identifier a normalized transcript still holds, standing alone; None."""
    targets = _present(messages, targets)
    if not targets:
        return None
    for text in texts_of(messages):
        if any(target[0] in text for target in targets):
            found = occurrences(text, targets)
            if found:
                return found[0][2]
    return None


def mismatched_placeholders(messages: list[dict[str, Any]]) -> str | None:
    """A path a tool output names under one placeholder while its call names that path, or a
    folder holding it, under another only: None when every call and its output agree."""
    calls: dict[str, dict[str, set[str]]] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call["function"].get("arguments"), str):
                calls[call.get("id")] = _placed_paths(call["function"]["arguments"])
        if message.get("role") == "tool" and isinstance(message.get("content"), str):
            called = calls.get(message.get("tool_call_id"))
            if not called:
                continue  # a call naming no placeholder path: nothing its output could contradict
            for rest, placeholders in _placed_paths(message["content"]).items():
                holders = {p for folder, named in called.items() if _holds(folder, rest) for p in named}
                if holders and not placeholders & holders:
                    return (
                        f"the output of tool call {message.get('tool_call_id')} names {rest or 'a folder'} under "
                        f"{', '.join(sorted(placeholders))}, the call under {', '.join(sorted(holders))}"
                    )
    return None


def _holds(folder: str, path: str) -> bool:
    return folder == path or folder == "" or path.startswith(folder + "/")


def _placed_paths(text: str) -> dict[str, set[str]]:
    """The path below each folder placeholder in `text` (`/src/app.py`, or "" for the folder
    itself), with the placeholders it is named under; escaped slashes read as slashes."""
    placed: dict[str, set[str]] = {}
    if "/workspace" not in text and "<RUN_DIR>" not in text:
        return placed
    for match in _PLACEHOLDER_PATH.finditer(text):
        placed.setdefault(match.group(2).replace("\\/", "/"), set()).add(match.group(1))
    return placed


def estimated_tokens(messages: list[dict[str, Any]]) -> int:
    """UTF-8 bytes of the contents, reasoning, tool names and arguments, / 4 rounded up."""
    size = 0
    for message in messages:
        for key in ("content", "reasoning_content"):
            if isinstance(message.get(key), str):
                size += len(message[key].encode("utf-8", "surrogatepass"))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            size += len(str(function.get("name", "")).encode("utf-8", "surrogatepass"))
            size += len(str(function.get("arguments", "")).encode("utf-8", "surrogatepass"))
    return math.ceil(size / 4)


class TokenRecount:
    """The checks' token count: the estimate, or each text encoded on its own by the tokenizer
    file the report names (the tokenizers library, loaded here, not the export's)."""

    def __init__(self, tokenizer: str | None) -> None:
        self._tokenizer = None
        if tokenizer is not None:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(tokenizer)

    @property
    def name(self) -> str:
        return "estimate" if self._tokenizer is None else "tokenizer"

    def count(self, messages: list[dict[str, Any]]) -> int:
        if self._tokenizer is None:
            return estimated_tokens(messages)
        total = 0
        for message in messages:
            pieces = [message.get("content"), message.get("reasoning_content")]
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                pieces += [str(function.get("name", "")), str(function.get("arguments", ""))]
            for piece in pieces:
                if isinstance(piece, str):
                    total += len(self._tokenizer.encode(piece, add_special_tokens=False).ids)
        return total


def metadata_counts(replaced: list[dict[str, Any]] | None) -> Counter[str]:
    """A row's record of replacements as counts by kind."""
    return Counter({entry["kind"]: entry["count"] for entry in replaced or ()})



def row_replacements(dataset: str, row: dict[str, Any]) -> list[list[dict[str, Any]] | None]:
    """What a row records as replaced, per line, in the order of its lines (verify.py's)."""
    metadata = row["metadata"]
    if dataset == "sft_rows":
        return [metadata.get("replacements")]
    if dataset == "preference_pairs":
        return [metadata.get("chosen_replacements"), metadata.get("rejected_replacements")]
    return list(metadata.get("replacements") or [None] * len(row["rollout_ids"]))


class RowRecount:
    """What the rows of one export must be, by the settings its report records (`filter`); a
    report without a setting was written before it existed: nothing normalized, no limit."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.normalize = settings.get("normalize_identifiers", False) is True
        self.group_by = settings.get("group_by", "prompt")
        self.max_tokens = settings.get("max_tokens")
        self.tokens = TokenRecount(settings.get("tokenizer"))

    def targets(self, line: dict[str, Any]) -> list[Target]:
        """What the line's rows must not hold: none when nothing is normalized."""
        return targets_of(identifiers_of(line)) if self.normalize else []

    def expected(self, line: dict[str, Any], targets: list[Target]) -> tuple[list[dict[str, Any]], Counter[str]]:
        """The ledger line's transcript as its rows must hold it, and the replacements by kind."""
        return normalized_transcript(line["messages"], targets)

    def too_long(self, line: dict[str, Any]) -> bool:
        if self.max_tokens is None:
            return False
        return self.tokens.count(self.expected(line, self.targets(line))[0]) > self.max_tokens

    def line_problem(
        self, line: dict[str, Any], counts: Counter[str], replaced: list[dict[str, Any]] | None, held: list[dict[str, Any]]
    ) -> str | None:
        """What is wrong with a row's record of its line (beyond its messages, compared by the
        caller): replacements not as recounted, more tokens than the limit."""
        if metadata_counts(replaced) != counts:
            recorded = dict(sorted(metadata_counts(replaced).items()))
            return f"records replacements {recorded}, the recount finds {dict(sorted(counts.items()))}"
        if self.max_tokens is not None and (tokens := self.tokens.count(held)) > self.max_tokens:
            return f"holds {tokens} tokens, above max_tokens {self.max_tokens}"
        return None

    def identifier_problem(self, held: list[dict[str, Any]], targets: list[Target]) -> str | None:
        """A normalized row that still names one of its line's identifiers, or whose tool output
        names a path under another placeholder than its call."""
        if not self.normalize:
            return None
        kind = leftover(held, targets)
        if kind is not None:
            return f"still holds its line's {kind.replace('_', ' ')}"
        return mismatched_placeholders(held)

    def row_problem(self, dataset: str, row: dict[str, Any], lines: list[dict[str, Any]]) -> str | None:
        """What is wrong with a row as a whole: its token counter, or (pairs and groups) its
        grouping: lines of one role and instance, and under `prompt` a prompt shared whole."""
        metadata = row["metadata"]
        if metadata.get("token_counter") != self.tokens.name:
            return f"says its tokens were counted by {metadata.get('token_counter')}, the report by {self.tokens.name}"
        if dataset == "sft_rows":
            return None
        if metadata.get("group_by") != self.group_by:
            return f"is grouped by {metadata.get('group_by')}, the report's setting is {self.group_by}"
        if any((line["role"], line["task"]["instance_id"]) != (metadata["role"], metadata["instance_id"]) for line in lines):
            return "joins lines of another role or instance than its own"
        sides = [row["chosen"], row["rejected"]] if dataset == "preference_pairs" else row["completions"]
        if self.group_by == "prompt" and any(not side or side[0]["role"] != "assistant" for side in sides):
            return "has a completion with a prompt of its own, though grouped by prompt"
        return None
