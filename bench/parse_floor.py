"""The parse floor of one round: read every input byte the backfill needs, parse it once with
the standard `json` module, write nothing.

    python bench/parse_floor.py OUTDIR OPENCODE_DB CLAUDE_PROJECTS_DIR
    python bench/parse_floor.py --ledger LEDGER      # the ledger's lines alone
    python bench/parse_floor.py --orjson ...         # either, parsed with orjson

It is the cost any backfill must pay at least: the cell caches, every result.json and
judge.json, the shot receipts, the cost ledger, the message and part rows of every session of
the round's worker cwds, and every Claude transcript of the round's proposer worktrees. It
prints the bytes and JSON documents it parsed, as JSON.

With `--ledger` it parses every line of a ledger instead: with the inputs' floor, what any
check that proves the ledger line by line from the inputs must read at least.

With `--orjson` the same documents are parsed with orjson, the parser the project reads with:
the least that reading them costs here, against which the checks are held (the standard
module's floor is the one the backfill is held to).
"""

import json
import os
import re
import sqlite3
import sys
from pathlib import Path

_SLUG = re.compile(r"[^A-Za-z0-9-]")


class _Parser:
    """Parses documents with `loads` (the standard module's by default), counting them and their bytes."""

    def __init__(self, loads=json.loads) -> None:
        self.parsed_bytes = self.documents = 0
        self.loads = loads

    def __call__(self, raw: bytes):
        self.parsed_bytes += len(raw)
        self.documents += 1
        try:
            return self.loads(raw)
        except ValueError:  # orjson's JSONDecodeError is one too
            return None


def _round_files(out: Path, parse: _Parser) -> list[str]:
    """The improve run's files, every cell cache and its run folder's judge.json and
    result.json; the worker cwds the result.json files list."""
    cwds: list[str] = []
    improve = out / "improve-run"
    for extra in (improve / "loop-provenance.json",):
        if extra.is_file():
            parse(extra.read_bytes())
    ledger = improve / "cost-ledger.jsonl"
    if ledger.is_file():
        for line in ledger.read_bytes().splitlines():
            parse(line)
    caches = sorted((improve / "baseline").glob("*/cached-result.json"))
    caches += sorted(improve.glob("gen-*/candidate-*/*/cached-result.json"))
    for cache in caches:
        record = parse(cache.read_bytes())
        artifact = record.get("artifact") if isinstance(record, dict) else None
        run_dir = artifact.get("runDir") if isinstance(artifact, dict) else None
        if not isinstance(run_dir, str):
            continue
        for name in ("judge.json", "result.json"):
            path = Path(run_dir, name)
            if path.is_file():
                value = parse(path.read_bytes())
                if name == "result.json" and isinstance(value, dict):
                    listed = (value.get("recoveredSpend") or {}).get("workerCwds") or []
                    cwds += [cwd for cwd in listed if isinstance(cwd, str)]
    return cwds


def _sessions(opencode_db: str, cwds: list[str], parse: _Parser) -> None:
    """The message and part rows of every session of `cwds`."""
    connection = sqlite3.connect(f"file:{opencode_db}?mode=ro", uri=True)
    wanted = set(cwds)
    # One pass over the session table (`directory` has no index), then each session's rows.
    session_ids = [row[0] for row in connection.execute("SELECT id, directory FROM session") if row[1] in wanted]
    for session_id in session_ids:
        for (data,) in connection.execute("SELECT data FROM message WHERE session_id = ?", (session_id,)):
            parse(data.encode() if isinstance(data, str) else data)
        for (data,) in connection.execute(
            "SELECT p.data FROM part p JOIN message m ON m.id = p.message_id WHERE m.session_id = ?", (session_id,)
        ):
            parse(data.encode() if isinstance(data, str) else data)
    connection.close()


def _proposer_files(out: Path, claude_projects: str, parse: _Parser) -> None:
    """The shot receipts and every Claude transcript of their worktrees."""
    shots = out / "proposer-shots"
    worktrees: set[str] = set()
    for receipt in sorted(shots.glob("*.json")) + sorted(shots.glob("*/*.json")):
        parse(receipt.read_bytes())
        name = receipt.stem.rsplit("-shot", 1)[0]
        author = receipt.parent.name if receipt.parent != shots else None
        worktrees.add(str(out / "proposer-wt" / (f"{name}-{author}" if author else name)))
    for worktree in sorted(worktrees):
        folder = Path(claude_projects) / _SLUG.sub("-", worktree)
        for transcript in sorted(folder.glob("*.jsonl")):
            with open(transcript, "rb") as handle:
                for line in handle:
                    if line.strip():
                        parse(line)


def main(out_dir: str, opencode_db: str, claude_projects: str, loads=json.loads) -> None:
    out = Path(os.path.abspath(out_dir))
    parse = _Parser(loads)
    cwds = _round_files(out, parse)
    _sessions(opencode_db, cwds, parse)
    _proposer_files(out, claude_projects, parse)
    print(json.dumps({"bytes": parse.parsed_bytes, "documents": parse.documents}))


def ledger_floor(ledger: str, loads=json.loads) -> None:
    parsed_bytes = documents = 0
    with open(ledger, "rb") as handle:
        for line in handle:
            loads(line)
            parsed_bytes += len(line)
            documents += 1
    print(json.dumps({"bytes": parsed_bytes, "documents": documents}))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    parser = json.loads
    if arguments[0] == "--orjson":
        import orjson

        parser, arguments = orjson.loads, arguments[1:]
    if arguments[0] == "--ledger":
        ledger_floor(arguments[1], parser)
    else:
        main(*arguments[:3], loads=parser)
