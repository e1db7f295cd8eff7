"""The audit's own count of the chat messages a session's rows make, as SQL: one grouped query
over any set of sessions (`SESSION_COUNTS_QUERY`, run by stores.session_rows).

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

The query also gives, for the gap proofs of "has no readable message parts", the session's
message rows and the part rows that make a message by a narrower rule that holds under any
reading of the docs: a non-empty text (not ignored), or in an assistant message a non-empty
reasoning text or a tool call with a call id.
"""

from __future__ import annotations

_MESSAGE = "CAST(m.data AS TEXT)"
_PART = "CAST(p.data AS TEXT)"
_ROLE = f"json_extract({_MESSAGE}, '$.role')"
_NON_EMPTY_TEXT = f"json_type({_PART}, '$.text') = 'text' AND json_extract({_PART}, '$.text') <> ''"

# A part of a message row, with what the counts need of each.
_PARTS = f"""
SELECT m.session_id AS session_id, m.id AS message_id, {_ROLE} AS role, p.id AS part_id,
    json_extract({_PART}, '$.type') AS type,
    json_type({_PART}, '$.text') = 'text' AS has_text,
    {_NON_EMPTY_TEXT} AS non_empty_text,
    json_type({_PART}, '$.ignored') IS 'true' AS ignored,
    json_extract({_PART}, '$.mime') AS mime,
    json_type({_PART}, '$.callID') = 'text' AS has_call_id
FROM message AS m JOIN part AS p ON p.message_id = m.id
WHERE m.session_id IN (SELECT value FROM wanted)
    AND json_valid({_MESSAGE}) AND json_type({_MESSAGE}) = 'object' AND {_ROLE} IN ('user', 'assistant')
    AND json_valid({_PART}) AND json_type({_PART}) = 'object'
"""

# Whether an assistant message's error leaves it out: set, and not an abort after some output.
_ERROR_SET = f"""(
    json_type({_MESSAGE}, '$.error') IS NOT NULL
    AND json_type({_MESSAGE}, '$.error') NOT IN ('null', 'false')
    AND NOT (json_type({_MESSAGE}, '$.error') IN ('integer', 'real') AND json_extract({_MESSAGE}, '$.error') = 0)
    AND NOT (json_type({_MESSAGE}, '$.error') = 'text' AND json_extract({_MESSAGE}, '$.error') = '')
    AND NOT (json_type({_MESSAGE}, '$.error') IN ('array', 'object')
        AND json_extract({_MESSAGE}, '$.error') IN ('[]', '{{}}'))
)"""
_ABORTED = f"json_type({_MESSAGE}, '$.error') = 'object' AND json_extract({_MESSAGE}, '$.error.name') = 'MessageAbortedError'"
_SYSTEM = f"""(
    (json_type({_MESSAGE}, '$.system') = 'text' AND json_extract({_MESSAGE}, '$.system') <> '')
    OR (json_type({_MESSAGE}, '$.system') = 'array' AND (
        SELECT count(*) >= 2 OR max(s.value <> '') FROM json_each({_MESSAGE}, '$.system') AS s WHERE s.type = 'text'
    ))
)"""

SESSION_COUNTS_QUERY = f"""
WITH wanted(value) AS (SELECT value FROM json_each(?)),
parts AS ({_PARTS}),
stepped AS (
    SELECT *, sum(type IS 'step-start') OVER (PARTITION BY message_id ORDER BY part_id ROWS UNBOUNDED PRECEDING) AS step
    FROM parts
),
users AS (
    SELECT session_id, max(
        (type IS 'text' AND has_text AND NOT ignored)
        OR (type IS 'file' AND coalesce(mime NOT IN ('text/plain', 'application/x-directory'), 1))
        OR type IN ('compaction', 'subtask')
    ) AS sent
    FROM parts WHERE role = 'user' GROUP BY message_id
),
assistants AS (
    SELECT m.session_id AS session_id, m.id AS message_id
    FROM message AS m
    WHERE m.session_id IN (SELECT value FROM wanted)
        AND json_valid({_MESSAGE}) AND json_type({_MESSAGE}) = 'object' AND {_ROLE} = 'assistant'
        AND (NOT {_ERROR_SET} OR ({_ABORTED} AND EXISTS (
            SELECT 1 FROM parts AS q WHERE q.message_id = m.id AND coalesce(q.type NOT IN ('step-start', 'reasoning'), 1)
        )))
),
steps AS (
    SELECT s.session_id AS session_id,
        (max(s.type IS 'text' AND s.non_empty_text) OR sum(s.type IS 'text' AND s.has_text) >= 2
            OR max(s.type IS 'reasoning' AND s.non_empty_text)) AS speaks,
        sum(s.type IS 'tool' AND s.has_call_id) AS calls
    FROM stepped AS s JOIN assistants AS a ON a.message_id = s.message_id
    GROUP BY s.message_id, s.step
),
conversation AS (
    SELECT session_id, sum(sent) AS made FROM users GROUP BY session_id
    UNION ALL
    SELECT session_id, sum((speaks OR calls > 0) + calls) FROM steps GROUP BY session_id
),
systems AS (
    SELECT DISTINCT m.session_id AS session_id FROM message AS m
    WHERE m.session_id IN (SELECT value FROM wanted)
        AND json_valid({_MESSAGE}) AND json_type({_MESSAGE}) = 'object' AND {_ROLE} = 'assistant' AND {_SYSTEM}
),
made AS (
    SELECT c.session_id AS session_id, sum(c.made) + (
        sum(c.made) > 0 AND c.session_id IN (SELECT session_id FROM systems)
    ) AS made
    FROM conversation AS c GROUP BY c.session_id
),
rows AS (
    SELECT m.session_id AS session_id, count(DISTINCT m.id) AS messages, count(DISTINCT CASE WHEN
        json_valid({_MESSAGE}) AND json_type({_MESSAGE}) = 'object' AND {_ROLE} IN ('user', 'assistant')
        AND json_valid({_PART}) AND json_type({_PART}) = 'object' AND (
            (json_extract({_PART}, '$.type') = 'text' AND {_NON_EMPTY_TEXT}
                AND json_type({_PART}, '$.ignored') IS NOT 'true')
            OR ({_ROLE} = 'assistant' AND json_extract({_PART}, '$.type') = 'reasoning' AND {_NON_EMPTY_TEXT})
            OR ({_ROLE} = 'assistant' AND json_extract({_PART}, '$.type') = 'tool'
                AND json_type({_PART}, '$.callID') = 'text')
        ) THEN p.id END) AS parts
    FROM message AS m LEFT JOIN part AS p ON p.message_id = m.id
    WHERE m.session_id IN (SELECT value FROM wanted)
    GROUP BY m.session_id
)
SELECT r.session_id, r.messages, r.parts, coalesce(d.made, 0)
FROM rows AS r LEFT JOIN made AS d ON d.session_id = r.session_id
"""
