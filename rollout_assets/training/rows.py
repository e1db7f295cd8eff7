"""One training row from ledger lines: the SFT row, the preference pair, the GRPO group."""

from __future__ import annotations

from typing import Any

from rollout_assets.training.arrow import arrow_tool
from rollout_assets.training.messages import estimated_tokens, prompt_length, training_message


def _messages(line: dict[str, Any]) -> list[dict[str, Any]]:
    return [training_message(message) for message in line["messages"]]


def line_metadata(line: dict[str, Any], round_key: str) -> dict[str, Any]:
    outcome, task = line["outcome"], line["task"]
    reward = outcome["reward"]
    return {
        "rollout_id": line["rollout_id"],
        "run_id": line["run_id"],
        "round": round_key,
        "role": line["role"],
        "candidate_id": line["candidate_id"],
        "instance_id": task["instance_id"],
        "rep": task["rep"],
        "reward": None if reward is None else float(reward),
        "reward_source": outcome["reward_source"],
        "model": line["policy"]["model"],
    }


def sft_row(line: dict[str, Any], round_key: str) -> dict[str, Any]:
    messages = _messages(line)
    return {
        "messages": messages,
        "tools": [arrow_tool(tool) for tool in line["tool_defs"]],
        "tokens": estimated_tokens(messages),
        "n_messages": len(messages),
        "metadata": line_metadata(line, round_key),
    }


def pair_row(chosen: dict[str, Any], rejected: dict[str, Any], round_key: str) -> dict[str, Any]:
    chosen_messages, rejected_messages = _messages(chosen), _messages(rejected)
    cut = prompt_length(chosen_messages)  # the same prompt on both sides: the pair's bucket
    chosen_reward, rejected_reward = float(chosen["outcome"]["reward"]), float(rejected["outcome"]["reward"])
    return {
        "prompt": chosen_messages[:cut],
        "chosen": chosen_messages[cut:],
        "rejected": rejected_messages[prompt_length(rejected_messages) :],
        "margin": chosen_reward - rejected_reward,
        "metadata": {
            "round": round_key,
            "run_id": chosen["run_id"],
            "role": chosen["role"],
            "instance_id": chosen["task"]["instance_id"],
            "chosen_rollout_id": chosen["rollout_id"],
            "rejected_rollout_id": rejected["rollout_id"],
            "chosen_reward": chosen_reward,
            "rejected_reward": rejected_reward,
        },
    }


def group_row(lines: list[dict[str, Any]], round_key: str) -> dict[str, Any]:
    transcripts = [_messages(line) for line in lines]
    cut = prompt_length(transcripts[0])
    return {
        "prompt": transcripts[0][:cut],
        "completions": [messages[prompt_length(messages) :] for messages in transcripts],
        "rewards": [float(line["outcome"]["reward"]) for line in lines],
        "rollout_ids": [line["rollout_id"] for line in lines],
        "metadata": {
            "round": round_key,
            "run_id": lines[0]["run_id"],
            "role": lines[0]["role"],
            "instance_id": lines[0]["task"]["instance_id"],
        },
    }
