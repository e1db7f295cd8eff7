"""The secrets the demo's agents leak, where real agents leak them (the `planted_secrets` case).

A worker that lists its environment prints cloud keys and service tokens, and the command that
points its clone at a remote carrying a token shows the token; a proposer that reads the
worktree's `.env` or a deploy key copies them into its transcript, and a database client it
runs takes its password on the command line. planted.py says which worker session and which
proposer shot carry them; opencode_store.py and claude_transcripts.py write these calls there.

OWNS the values and the tool calls that carry them. Every value is drawn while the demo is
written, from a `random.Random` of the round's seed and name kept apart from the round's own
stream (so every other value of the round is the same with or without them): no secret-shaped
value is stored in the repository, where a secret scanner would rightly report it.
`RoundLeaks.secrets` names each value with the kind the release's scrubber counts it under
(docs/release.md), so a test can hold the demo's release to scrubbing every one.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from functools import cache
from typing import Any

from rollout_assets.demo.round_plan import RoundSpec

_ALNUM = string.ascii_letters + string.digits
_BASE64 = _ALNUM + "+/"
_UPPER_BASE32 = string.ascii_uppercase + "234567"


@dataclass(frozen=True)
class PlantedSecret:
    kind: str  # the scrub report's kind for it (a rule of rollout_assets/release/secret_rules.py)
    value: str  # what must not reach a release
    carrier: str  # which call carries it: "worker bash input", "proposer Read output", ...


@dataclass(frozen=True)
class LeakingCall:
    """One tool call: its tool, input and output; `note` is opencode's title of the call, or
    the text a proposer says before it."""

    tool: str
    input: dict[str, Any]
    output: str
    note: str


def _word(rng: random.Random, length: int, alphabet: str = _ALNUM) -> str:
    """A random value with letters and digits both (a real key has both, and a scrubber may
    rightly leave a run of letters alone as a word)."""
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(length))
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            return value


def _numbered(text: str) -> str:
    """A file as Claude Code's Read tool shows it: each line after its number and a tab."""
    return "".join(f"{n:6d}\t{line}\n" for n, line in enumerate(text.splitlines(), start=1))


@dataclass(frozen=True)
class RoundLeaks:
    """The secrets of one round, and the calls that leak them."""

    github_token: str
    aws_access_key_id: str
    aws_secret_access_key: str
    database_password: str
    slack_token: str
    stripe_key: str
    anthropic_key: str
    openai_key: str
    private_key_body: tuple[str, ...]
    mysql_password: str
    seed_text: str  # seeds `rng()`: the draws of the transcript lines that carry the leaks

    def rng(self) -> random.Random:
        """A stream of its own for whatever the leaking calls draw (times, token counts)."""
        return random.Random(self.seed_text + "|draws")

    @property
    def secrets(self) -> tuple[PlantedSecret, ...]:
        worker_out, read_out = "worker bash output", "proposer Read output"
        return (
            PlantedSecret("github-token", self.github_token, "worker bash input"),
            PlantedSecret("aws-access-key-id", self.aws_access_key_id, worker_out),
            PlantedSecret("aws-secret-key", self.aws_secret_access_key, worker_out),
            PlantedSecret("url-credentials", self.database_password, worker_out),
            PlantedSecret("slack-token", self.slack_token, worker_out),
            PlantedSecret("stripe-key", self.stripe_key, worker_out),
            PlantedSecret("anthropic-key", self.anthropic_key, read_out),
            PlantedSecret("openai-key", self.openai_key, read_out),
            *(PlantedSecret("private-key", line, read_out) for line in self.private_key_body),
            PlantedSecret("password-flag", self.mysql_password, "proposer Bash input"),
        )

    def worker_call(self, scenario_id: str) -> LeakingCall:
        """A worker's first call: it points its clone at a remote with a token in its URL,
        fetches, and lists its environment, which holds the harness's cloud and service keys."""
        repository = scenario_id.rsplit("-", 1)[0].split("__")[-1]
        command = (
            f"git remote set-url origin https://x-access-token:{self.github_token}@github.com/loops-bot/"
            f"{repository}.git && git fetch -q origin && env | sort"
        )
        environment = (
            f"AWS_ACCESS_KEY_ID={self.aws_access_key_id}\n"
            "AWS_DEFAULT_REGION=eu-west-1\n"
            f"AWS_SECRET_ACCESS_KEY={self.aws_secret_access_key}\n"
            f"DATABASE_URL=postgres://loops:{self.database_password}@db.internal:5432/loops\n"
            "HOME=/root\n"
            "LANG=C.UTF-8\n"
            "PATH=/usr/local/bin:/usr/bin:/bin\n"
            f"SLACK_BOT_TOKEN={self.slack_token}\n"
            f"STRIPE_SECRET_KEY={self.stripe_key}\n"
        )
        return LeakingCall(
            "bash",
            {"command": command, "description": "Refresh the clone and list the environment"},
            environment,
            "Refresh the clone and list the environment",
        )

    def proposer_calls(self, worktree: str) -> tuple[LeakingCall, ...]:
        """A proposer's detour: it reads the worktree's `.env` and the deploy key the harness
        mounts, and asks the results database with its password on the command line."""
        settings = (
            "# loops settings\n"
            "JUDGE=swe-arena-official-judge\n"
            f"ANTHROPIC_API_KEY={self.anthropic_key}\n"
            f"OPENAI_API_KEY={self.openai_key}\n"
            "MAX_WORKERS=4\n"
        )
        label = "RSA PRIVATE"  # the markers are put together here: no marker line is stored whole
        key = "\n".join(
            (f"-----BEGIN {label} KEY-----", *self.private_key_body, f"-----END {label} KEY-----")
        )
        query = "SELECT status, COUNT(*) FROM cells GROUP BY status"
        return (
            LeakingCall(
                "Read",
                {"file_path": f"{worktree}/.env"},
                _numbered(settings),
                "The worktree's .env should say which judge the loop runs.",
            ),
            LeakingCall(
                "Read",
                {"file_path": f"{worktree}/deploy/loops-ci.pem"},
                _numbered(key),
                "Workers clone over SSH; check the deploy key the harness mounts.",
            ),
            LeakingCall(
                "Bash",
                {"command": f"mysql -h db.internal -u loops -p{self.mysql_password} loops -e '{query}'"},
                "mysql: [Warning] Using a password on the command line interface can be insecure.\n"
                "status\tCOUNT(*)\nresolved\t3\nunresolved\t2\n",
                "Count the baseline's cells by status in the results database.",
            ),
        )


@cache
def round_leaks(spec: RoundSpec) -> RoundLeaks:
    """The secrets of round `spec`: the same for the same seed and name, other for another round."""
    seed_text = f"planted-secrets|{spec.seed}|{spec.name}"
    rng = random.Random(seed_text)
    return RoundLeaks(
        github_token="ghp_" + _word(rng, 36),
        aws_access_key_id="AKIA" + _word(rng, 16, _UPPER_BASE32),
        aws_secret_access_key=_word(rng, 40, _BASE64),
        database_password=_word(rng, 20),
        slack_token=f"xoxb-{rng.randint(10**10, 10**11)}-{rng.randint(10**12, 10**13)}-{_word(rng, 24)}",
        stripe_key="sk_test_51" + _word(rng, 96),
        anthropic_key="sk-ant-api03-" + _word(rng, 93, _ALNUM + "_-") + "AA",
        openai_key="sk-proj-" + _word(rng, 48, _ALNUM + "_-") + "T3BlbkFJ" + _word(rng, 48, _ALNUM + "_-"),
        private_key_body=("MIIEpAIBAAKCAQEA" + _word(rng, 48, _BASE64),)
        + tuple(_word(rng, 64, _BASE64) for _ in range(5))
        + (_word(rng, 28, _BASE64) + "==",),
        mysql_password=_word(rng, 18),
        seed_text=seed_text,
    )
