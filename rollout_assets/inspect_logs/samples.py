"""One ledger line as one Inspect sample, and the summary the viewer lists it by.

The sample is the JSON Inspect's `EvalSample` dumps to (`model_dump(exclude_none=True)`, key
order included), built as plain dicts for speed (see messages.py):

- `id` is the line's number in the ledger, so the viewer lists a log in ledger order
  (instance, rep, session); `uuid` is the rollout id;
- `input` is the first user message's text, or for a gap line `No transcript: <gap reason>`,
  so the list says what was asked, or what was lost and why; a gap line has no messages;
- `messages` is the transcript (messages.py);
- `scores` holds one score, `reward`, whose value is the line's reward, its explanation the
  reward source and its metadata the verdict; a null reward gives no score at all, never 0;
- `metadata` says where the line is and what it cost: line number, rollout and parent ids,
  round, candidate, instance, rep, policy, reward, state, cost and tokens, gap, artifacts;
  an `agent` line also names its proposer (`proposer_rollout_id`, `proposer_line`);
- `model_usage` holds the tokens when the line measured them (never 0 for "not measured"),
  `total_time` the wall time, `error` the error the invocation ended in.

The summary is `EvalSample.summary()`'s selection of those fields, kept small: the input cut
as Inspect cuts it (5,120 characters), metadata without the free-form `metrics`, the score
without the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout_assets.inspect_logs.messages import chat_messages

REWARD_SCORE = "reward"
NO_MODEL = "none/none"  # Inspect's name for "no model"
GAP_INPUT_PREFIX = "No transcript: "
# Inspect cuts a summary's input at this length and appends its marker (log/_util.py).
SUMMARY_INPUT_CHARS = 5120
SUMMARY_INPUT_CUT = "...\n(content truncated)"


@dataclass(frozen=True, slots=True)
class LinePlace:
    """Where a line sits in its ledger: its number, and its parent's line when the parent is
    the line that spawned it just before (a worker's supervisor, a sub-agent's proposer)."""

    line: int
    parent_line: int | None


def _whole(value: Any) -> int | None:
    """A token count as an integer, or None when it is not a whole number (or not measured)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def model_name(policy: dict[str, Any]) -> str | None:
    """`provider/model` as Inspect names models, the model alone without a provider."""
    model, provider = policy.get("model"), policy.get("provider")
    if model is None:
        return None
    return f"{provider}/{model}" if provider else model


def model_usage(cost: dict[str, Any]) -> dict[str, Any] | None:
    """Inspect's `ModelUsage` of a line, or None when its input and output tokens were not
    both measured: Inspect's counts default to 0, and 0 must not stand for "not measured"."""
    tokens_in, tokens_out = _whole(cost.get("tokens_in")), _whole(cost.get("tokens_out"))
    if tokens_in is None or tokens_out is None:
        return None
    cache_write, cache_read = _whole(cost.get("cache_write")), _whole(cost.get("cache_read"))
    usage: dict[str, Any] = {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        # As Inspect counts an Anthropic call: every input token, cached or not, and the output.
        "total_tokens": tokens_in + tokens_out + (cache_write or 0) + (cache_read or 0),
    }
    for key, value in (
        ("input_tokens_cache_write", cache_write),
        ("input_tokens_cache_read", cache_read),
        ("reasoning_tokens", _whole(cost.get("tokens_reasoning"))),
    ):
        if value is not None:
            usage[key] = value
    if cost.get("usd") is not None:
        usage["total_cost"] = float(cost["usd"])
    return usage


def _input_text(line: dict[str, Any]) -> str:
    messages = line["messages"]
    if not messages:
        return GAP_INPUT_PREFIX + line["provenance"].get("gap", "")
    first_user = next((message for message in messages if message["role"] == "user"), messages[0])
    return first_user.get("content") or ""


def _metadata(line: dict[str, Any], place: LinePlace) -> dict[str, Any]:
    task, policy, outcome = line["task"], line["policy"], line["outcome"]
    cost, artifacts, provenance = line["cost"], line["artifacts"], line["provenance"]
    metadata: dict[str, Any] = {
        "line": place.line,
        "rollout_id": line["rollout_id"],
        "parent_rollout_id": line["parent_rollout_id"],
        "parent_line": place.parent_line,
        "role": line["role"],
        "run_id": line["run_id"],
        "candidate_id": line["candidate_id"],
        "generation": line["generation"],
        "candidate_index": line["candidate_index"],
        "suite": task["suite"],
        "instance_id": task["instance_id"],
        "split": task["split"],
        "seed": task["seed"],
        "rep": task["rep"],
        "harness": policy["harness"],
        "model": policy["model"],
        "provider": policy["provider"],
        "profile_commit": policy["profile_commit"],
        "reward": outcome["reward"],
        "reward_source": outcome["reward_source"],
        "is_completed": outcome["is_completed"],
        "is_truncated": outcome["is_truncated"],
        "error": outcome["error"],
        "gap": provenance.get("gap"),
        "cost_usd": cost["usd"],
        "tokens_in": cost["tokens_in"],
        "tokens_out": cost["tokens_out"],
        "tokens_reasoning": cost["tokens_reasoning"],
        "cache_read": cost["cache_read"],
        "cache_write": cost["cache_write"],
        "wall_s": cost["wall_s"],
        "transcript_ref": artifacts["transcript_ref"],
        "patch_path": artifacts["patch_path"],
        "run_dir": artifacts["run_dir"],
        "captured_at": provenance["captured_at"],
    }
    if line["role"] == "agent":
        metadata["proposer_rollout_id"] = line["parent_rollout_id"]
        metadata["proposer_line"] = place.parent_line
    metadata["metrics"] = outcome["metrics"]
    return metadata


def _score(outcome: dict[str, Any], *, with_verdict: bool) -> dict[str, Any] | None:
    if outcome["reward"] is None:
        return None
    score: dict[str, Any] = {"value": outcome["reward"]}
    if outcome["reward_source"] is not None:
        score["explanation"] = outcome["reward_source"]
    if with_verdict and outcome["verdict"] is not None:
        score["metadata"] = {"verdict": outcome["verdict"]}
    score["history"] = []
    return score


@dataclass(frozen=True, slots=True)
class ConvertedLine:
    """A line as the sample and summary JSON values, and what its log's header counts."""

    sample: dict[str, Any]
    summary: dict[str, Any]
    model: str | None
    usage: dict[str, Any] | None


def convert_line(line: dict[str, Any], place: LinePlace) -> ConvertedLine:
    """The Inspect sample and summary of one validated ledger line."""
    outcome, rollout_id = line["outcome"], line["rollout_id"]
    text = _input_text(line)
    metadata = _metadata(line, place)
    model = model_name(line["policy"])
    usage = model_usage(line["cost"])
    usage_by_model = {model or NO_MODEL: usage} if usage is not None else {}
    wall_s = line["cost"]["wall_s"]
    # Keys in the order Inspect's EvalSample dumps them, so the bytes are the ones Inspect writes.
    sample: dict[str, Any] = {
        "id": place.line,
        "epoch": 1,
        "input": text,
        "target": "",
        "messages": chat_messages(line["messages"], rollout_id),
        "output": {"model": "", "choices": [], "completion": ""},
    }
    score = _score(outcome, with_verdict=True)
    if score is not None:
        sample["scores"] = {REWARD_SCORE: score}
    sample.update({"metadata": metadata, "store": {}, "events": [], "model_usage": usage_by_model, "role_usage": {}})
    if wall_s is not None:
        sample["total_time"] = float(wall_s)
    sample["uuid"] = rollout_id
    if outcome["error"] is not None:
        sample["error"] = {"message": outcome["error"], "traceback": "", "traceback_ansi": ""}
    sample["attachments"] = {}
    return ConvertedLine(sample, _summary(sample, outcome, len(line["messages"])), model, usage)


def _summary(sample: dict[str, Any], outcome: dict[str, Any], message_count: int) -> dict[str, Any]:
    text = sample["input"]
    if len(text) > SUMMARY_INPUT_CHARS:
        text = text[:SUMMARY_INPUT_CHARS] + SUMMARY_INPUT_CUT
    summary: dict[str, Any] = {
        "id": sample["id"],
        "epoch": 1,
        "input": text,
        "target": "",
        "metadata": {key: value for key, value in sample["metadata"].items() if key != "metrics"},
    }
    score = _score(outcome, with_verdict=False)
    if score is not None:
        summary["scores"] = {REWARD_SCORE: score}
    summary.update({"model_usage": sample["model_usage"], "role_usage": {}})
    if "total_time" in sample:
        summary["total_time"] = sample["total_time"]
    summary["uuid"] = sample["uuid"]
    if "error" in sample:
        summary["error"] = sample["error"]["message"]
    summary.update({"completed": True, "message_count": message_count})
    return summary
