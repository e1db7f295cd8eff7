"""The independent scan of a written release with detect-secrets: its regex plugins (the
entropy plugins off, as they flag every hash and id), its heuristic filters on. Nothing of the
scrubber is used: a secret the scrubber missed is found here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from rollout_assets.training.files import parquet_rows

REGEX_PLUGINS = (
    "ArtifactoryDetector", "AWSKeyDetector", "AzureStorageKeyDetector", "BasicAuthDetector", "CloudantDetector",
    "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector", "IbmCloudIamDetector",
    "IbmCosHmacDetector", "JwtTokenDetector", "KeywordDetector", "MailchimpDetector", "NpmDetector",
    "OpenAIDetector", "PrivateKeyDetector", "PypiTokenDetector", "SendGridDetector", "SlackDetector",
    "SoftlayerDetector", "SquareOAuthDetector", "StripeDetector", "TelegramBotTokenDetector", "TwilioKeyDetector",
)


@dataclass(frozen=True)
class Finding:
    file: str
    row: int | None  # None for a text file (the card, the manifest)
    field: str
    rule: str

    def __str__(self) -> str:
        where = f"row {self.row}, {self.field}" if self.row is not None else f"line {self.field}"
        return f"{self.file}: {where}: {self.rule}"


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def scan_release(release: Path) -> list[Finding]:
    """Every finding in the release's data files, card and manifest."""
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import transient_settings

    findings = []
    with transient_settings({"plugins_used": [{"name": name} for name in REGEX_PLUGINS]}):
        for path in sorted(release.rglob("*.parquet")):
            relative = str(path.relative_to(release))
            for number, row in enumerate(parquet_rows(path), start=1):
                for field, text in _strings(row, ""):
                    for line in text.splitlines():
                        findings += [Finding(relative, number, field, s.type) for s in scan_line(line)]
        for name in ("README.md", "manifest.json", "scrub-report.json"):
            if (release / name).is_file():
                for lineno, line in enumerate((release / name).read_text(encoding="utf-8").splitlines(), start=1):
                    findings += [Finding(name, None, str(lineno), s.type) for s in scan_line(line)]
    return findings


