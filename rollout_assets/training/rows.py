"""One training row from ledger lines: the SFT row, the preference pair, the GRPO group.

Every row holds its lines' normalized transcripts (prepare.py) and says in its metadata what
was replaced and which counter counted its tokens; pairs and groups also say how they were
grouped. The prompt of a pair or a group is what all its lines share before their first
assistant turn: with `group_by` `prompt` that is each line's whole prompt, with `instance` a
completion may begin with a prompt of its own.
"""

from __future__ import annotations

from typing import Any

from rollout_assets.training.arrow import arrow_tool
from rollout_assets.training.filter import TrainingFilter
from rollout_assets.training.messages import prompt_length
from rollout_assets.training.prepare import RowTranscript, counter_of, row_transcript


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


def shared_prompt_length(transcripts: list[list[dict[str, Any]]]) -> int:
    """How many leading messages every transcript has alike, none past its first assistant turn."""
    limit = min(prompt_length(messages) for messages in transcripts)
    first = transcripts[0]
    for index in range(limit):
        if any(messages[index] != first[index] for messages in transcripts[1:]):
            return index
    return limit


class RowBuilder:
    """Builds the rows of one round's datasets with one set of settings."""

    def __init__(self, round_key: str, settings: TrainingFilter) -> None:
        self.round_key, self.settings = round_key, settings
        self._counter = counter_of(settings)

    def transcript(self, line: dict[str, Any]) -> RowTranscript:
        """A ledger line as rows hold it (identifiers normalized as the settings say)."""
        return row_transcript(line, self.settings)

    def sft_row(self, transcript: RowTranscript) -> dict[str, Any]:
        line, messages = transcript.line, transcript.messages
        return {
            "messages": messages,
            "tools": [arrow_tool(tool) for tool in line["tool_defs"]],
            "tokens": self._counter.count(messages),
            "n_messages": len(messages),
            "metadata": {
                **line_metadata(line, self.round_key),
                "token_counter": self._counter.name,
                "replacements": transcript.replaced,
            },
        }

    def pair_row(self, chosen: RowTranscript, rejected: RowTranscript) -> dict[str, Any]:
        cut = shared_prompt_length([chosen.messages, rejected.messages])
        chosen_reward = float(chosen.line["outcome"]["reward"])
        rejected_reward = float(rejected.line["outcome"]["reward"])
        return {
            "prompt": chosen.messages[:cut],
            "chosen": chosen.messages[cut:],
            "rejected": rejected.messages[cut:],
            "margin": chosen_reward - rejected_reward,
            "metadata": {
                **self._group_metadata(chosen.line),
                "chosen_rollout_id": chosen.line["rollout_id"],
                "rejected_rollout_id": rejected.line["rollout_id"],
                "chosen_reward": chosen_reward,
                "rejected_reward": rejected_reward,
                "chosen_replacements": chosen.replaced,
                "rejected_replacements": rejected.replaced,
            },
        }

    def group_row(self, transcripts: list[RowTranscript]) -> dict[str, Any]:
        cut = shared_prompt_length([transcript.messages for transcript in transcripts])
        return {
            "prompt": transcripts[0].messages[:cut],
            "completions": [transcript.messages[cut:] for transcript in transcripts],
            "rewards": [float(transcript.line["outcome"]["reward"]) for transcript in transcripts],
            "rollout_ids": [transcript.line["rollout_id"] for transcript in transcripts],
            "metadata": {
                **self._group_metadata(transcripts[0].line),
                "replacements": [transcript.replaced for transcript in transcripts],
            },
        }

    def _group_metadata(self, line: dict[str, Any]) -> dict[str, Any]:
        return {
            "round": self.round_key,
            "run_id": line["run_id"],
            "role": line["role"],
            "instance_id": line["task"]["instance_id"],
            "group_by": self.settings.group_by,
            "token_counter": self._counter.name,
        }
