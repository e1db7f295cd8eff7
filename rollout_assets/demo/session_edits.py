"""An edit of one worker session's rows while they are still buffered: what a planted shape
does after the session was written as usual, so the session takes the round's random draws as
every other one does and every later value of the round stays as it was.

OWNS `cut_to_one_answer` (the `answer_only` shape of planted.py); the rows are
opencode_store.py's, as it buffers them: messages (id, session_id, time_created, data) and parts
(id, message_id, session_id, time_created, data).
"""

from __future__ import annotations

import json
from typing import Any

from rollout_assets.demo.files import compact

MessageRow = tuple[str, str, int, str]
PartRow = tuple[str, str, str, int, str]


def cut_to_one_answer(
    messages: list[MessageRow], parts: list[PartRow], session_id: str, text: str
) -> dict[str, Any]:
    """Cut session `session_id` to its prompt and one answer without tools: its first assistant
    message keeps only its first step, whose content becomes one text part `text` (in the row of
    the step's first content part), ending in `stop`; its later assistant messages and their
    parts go. Returns the step's spend, `{"cost", "tokens"}` of its step-finish part."""
    own = [row for row in messages if row[1] == session_id]
    first = own[1]  # own[0] is the prompt; the shape plants no other defect
    step = [row for row in parts if row[1] == first[0]]
    finish_at = next(i for i, row in enumerate(step) if json.loads(row[4])["type"] == "step-finish")
    start, content, finish = step[0], step[1], step[finish_at]
    finish_data = json.loads(finish[4]) | {"reason": "stop"}
    message_data = json.loads(first[3])
    message_data["time"]["completed"] = finish[3]
    message_data.update(cost=finish_data["cost"], tokens=finish_data["tokens"], finish="stop")
    kept_parts = [
        start,
        (*content[:4], compact({"type": "text", "text": text})),
        (*finish[:4], compact(finish_data)),
    ]
    dropped = {row[0] for row in own[1:]}
    messages[:] = [row for row in messages if row[0] not in dropped] + [(*first[:3], compact(message_data))]
    parts[:] = [row for row in parts if row[1] not in dropped] + kept_parts
    return {"cost": finish_data["cost"], "tokens": finish_data["tokens"]}
