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

# Whether a message row's data is one the counts read: a JSON object whose role is user or assistant.
_CHAT = f"json_valid({_MESSAGE}) AND json_type({_MESSAGE}) = 'object' AND {_ROLE} IN ('user', 'assistant')"

# Whether an assistant message's error is set (not null, false, 0, "", [] or {}).
_ERROR_SET = f"""(
    json_type({_MESSAGE}, '$.error') IS NOT NULL
    AND json_type({_MESSAGE}, '$.error') NOT IN ('null', 'false')
    AND NOT (json_type({_MESSAGE}, '$.error') IN ('integer', 'real') AND json_extract({_MESSAGE}, '$.error') = 0)
    AND NOT (json_type({_MESSAGE}, '$.error') = 'text' AND json_extract({_MESSAGE}, '$.error') = '')
    AND NOT (json_type({_MESSAGE}, '$.error') IN ('array', 'object')
        AND json_extract({_MESSAGE}, '$.error') IN ('[]', '{{}}'))
)"""
_ABORTED = (
    f"json_type({_MESSAGE}, '$.error') = 'object'"
    f" AND json_extract({_MESSAGE}, '$.error.name') = 'MessageAbortedError'"
)
_SYSTEM = f"""(
    (json_type({_MESSAGE}, '$.system') = 'text' AND json_extract({_MESSAGE}, '$.system') <> '')
    OR (json_type({_MESSAGE}, '$.system') = 'array' AND (
        SELECT count(*) >= 2 OR max(s.value <> '') FROM json_each({_MESSAGE}, '$.system') AS s WHERE s.type = 'text'
    ))
)"""

# Each message row of the sessions asked for, read once; then each part of its chat messages,
# read once; every count below is taken from these two.
SESSION_COUNTS_QUERY = f"""
WITH wanted(value) AS (SELECT value FROM json_each(?)),
messages AS MATERIALIZED (
    SELECT m.session_id AS session_id, m.id AS message_id,
        CASE WHEN {_CHAT} THEN {_ROLE} END AS role,
        CASE WHEN {_CHAT} AND {_ROLE} = 'assistant' THEN {_ERROR_SET} END AS error_set,
        CASE WHEN {_CHAT} AND {_ROLE} = 'assistant' THEN {_ABORTED} END AS aborted,
        CASE WHEN {_CHAT} AND {_ROLE} = 'assistant' THEN {_SYSTEM} END AS system
    FROM message AS m WHERE m.session_id IN (SELECT value FROM wanted)
),
parts AS MATERIALIZED (
    SELECT g.session_id AS session_id, g.message_id AS message_id, g.role AS role, p.id AS part_id,
        json_extract({_PART}, '$.type') AS type,
        json_type({_PART}, '$.text') = 'text' AS has_text,
        {_NON_EMPTY_TEXT} AS non_empty_text,
        json_type({_PART}, '$.ignored') IS 'true' AS ignored,
        json_extract({_PART}, '$.mime') AS mime,
        json_type({_PART}, '$.callID') = 'text' AS has_call_id
    FROM messages AS g JOIN part AS p ON p.message_id = g.message_id
    WHERE g.role IS NOT NULL AND json_valid({_PART}) AND json_type({_PART}) = 'object'
),
sent AS (
    SELECT g.message_id AS message_id, g.session_id AS session_id, g.role AS role, max(
        (p.type IS 'text' AND p.has_text AND NOT p.ignored)
        OR (p.type IS 'file' AND coalesce(p.mime NOT IN ('text/plain', 'application/x-directory'), 1))
        OR p.type IN ('compaction', 'subtask')
    ) AS user_sent
    FROM messages AS g JOIN parts AS p ON p.message_id = g.message_id
    GROUP BY g.message_id
    HAVING g.role = 'user' OR NOT g.error_set
        OR (g.aborted AND max(coalesce(p.type NOT IN ('step-start', 'reasoning'), 1)))
),
steps AS (
    SELECT session_id,
        (max(type IS 'text' AND non_empty_text) OR sum(type IS 'text' AND has_text) >= 2
            OR max(type IS 'reasoning' AND non_empty_text)) AS speaks,
        sum(type IS 'tool' AND has_call_id) AS calls
    FROM (
        SELECT p.*, sum(p.type IS 'step-start') OVER (
            PARTITION BY p.message_id ORDER BY p.part_id ROWS UNBOUNDED PRECEDING
        ) AS step
        FROM parts AS p JOIN sent AS s ON s.message_id = p.message_id AND s.role = 'assistant'
    )
    GROUP BY message_id, step
),
conversation AS (
    SELECT session_id, user_sent AS made FROM sent WHERE role = 'user'
    UNION ALL
    SELECT session_id, (speaks OR calls > 0) + calls FROM steps
),
made AS (
    SELECT session_id, sum(made) AS made FROM conversation GROUP BY session_id
),
narrow AS (
    SELECT session_id, count(DISTINCT part_id) AS parts FROM parts
    WHERE (type IS 'text' AND non_empty_text AND NOT ignored)
        OR (role = 'assistant' AND type IS 'reasoning' AND non_empty_text)
        OR (role = 'assistant' AND type IS 'tool' AND has_call_id)
    GROUP BY session_id
),
rows AS (
    SELECT session_id, count(DISTINCT message_id) AS messages, max(system) AS system
    FROM messages GROUP BY session_id
)
SELECT r.session_id, r.messages, coalesce(n.parts, 0),
    coalesce(d.made, 0) + (coalesce(d.made, 0) > 0 AND coalesce(r.system, 0))
FROM rows AS r LEFT JOIN narrow AS n ON n.session_id = r.session_id LEFT JOIN made AS d ON d.session_id = r.session_id
"""
