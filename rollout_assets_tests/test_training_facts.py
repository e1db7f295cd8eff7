"""The training checks' per-line state on disk (training/verify_facts.py and the accounting's
tables beside it, training/verify_accounting.py): what they find is what the same rules find
over dicts in memory, the judgement of every line one at a time."""

from __future__ import annotations

import random
from typing import Any

from rollout_assets.training.verify_accounting import _accounting_tables, _fate_problem, _line_problems
from rollout_assets.training.verify_facts import LedgerFacts, LedgerFactsTable

REASONS = ("gap", "role_excluded", "gated", "error", "incomplete", "truncated", "no_reward")
FATES = ("row", *REASONS, "too_long", "duplicate", "per_instance_cap", "group_too_small", None)


def _random_fact(draw: random.Random, lineno: int) -> LedgerFacts:
    return LedgerFacts(
        lineno=lineno, offset=lineno * 10, length=9,
        reward=draw.choice([None, 0, 1, 0.5, 1.0]),
        gated=draw.random() < 0.2, role=draw.choice(["worker", "supervisor", "proposer", None]),
        has_gap=draw.random() < 0.2, error=draw.random() < 0.2, completed=draw.random() < 0.8,
        truncated=draw.random() < 0.2, instance_id=draw.choice(["a", "b"]),
    )  # fmt: skip


def test_a_repeated_rollout_id_is_the_later_line_at_the_first_place() -> None:
    draw = random.Random(7)
    ids: list[Any] = [f"r-{draw.randrange(30)}" for _ in range(200)] + [None, "null", None, 5, "5"]
    in_memory: dict[Any, LedgerFacts] = {}
    with LedgerFactsTable() as table:
        for lineno, rollout_id in enumerate(ids, start=1):
            fact = _random_fact(draw, lineno)
            table.add(rollout_id, fact)
            in_memory[rollout_id] = fact
        assert list(table.items()) == list(in_memory.items())
        assert len(table) == len(in_memory)
        assert table.get_many(["r-3", None, "null", 5, "5", "absent"]) == {
            key: in_memory[key] for key in ("r-3", None, "null", 5, "5") if key in in_memory
        }
        assert "absent" not in table and None in table and table.get("absent") is None


def test_the_accounting_query_passes_over_no_wrong_fate() -> None:
    """Every line the SQL lets through is judged in Python; a line it passes over must have no
    problem when judged the same way."""
    draw = random.Random(11)
    roles = {"worker", "supervisor"}
    for _ in range(20):
        with LedgerFactsTable() as table:
            facts = {f"r-{n}": _random_fact(draw, n) for n in range(1, 300)}
            for rollout_id, fact in facts.items():
                table.add(rollout_id, fact)
            fates = {rollout_id: draw.choice(FATES) for rollout_id in facts}
            held = {rollout_id for rollout_id in facts if draw.random() < 0.4}
            with _accounting_tables(table):
                table.connection.executemany(
                    "INSERT INTO fate (rollout_id, n, fate) VALUES (?, ?, ?)",
                    [(rollout_id, n, fate) for n, (rollout_id, fate) in enumerate(fates.items()) if fate is not None],
                )
                table.connection.executemany("INSERT INTO held (rollout_id) VALUES (?)", [(r,) for r in held])
                found = {int(problem.split()[2]) for _, problem in _line_problems(table, roles)}
            expected = {
                fact.lineno
                for rollout_id, fact in facts.items()
                if _fate_problem(fates[rollout_id], rollout_id in held, fact, roles) is not None
            }
            assert found == expected and expected
