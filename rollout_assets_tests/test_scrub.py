"""The scrubber on secrets as agents meet them, on ordinary code, and its allowlist."""

import json
import random
from pathlib import Path

import pytest

from rollout_assets.release.allowlist import read_allowlist
from rollout_assets.release.config import ReleaseError
from rollout_assets.release.detectors import detect, plugin_names
from rollout_assets.release.scrub import Scrubber, value_hash
from rollout_assets_tests.secret_shapes import FAMILIES, split_private_key

SEEDS = range(5)
CODE = (Path(__file__).parent / "ordinary_code.txt").read_text(encoding="utf-8")


def _contexts(text: str) -> dict[str, str]:
    """The text where a transcript holds it: as output, inside a tool call's JSON arguments,
    and inside JSON escaped twice (a command whose argument is JSON)."""
    arguments = json.dumps({"command": "cat <<'EOF' > config\n" + text + "EOF"})
    return {
        "output": text,
        "arguments": arguments,
        "escaped-twice": json.dumps({"tool": "run", "input": arguments}),
    }


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", SEEDS)
def test_no_secret_of_a_family_survives_in_any_context(family: str, seed: int) -> None:
    text, values = FAMILIES[family](random.Random(f"{family}-{seed}"))
    for context, written in _contexts(text).items():
        scrubber = Scrubber()
        scrubbed = scrubber.scrub(written)
        for value in values:
            for form in (value, json.dumps(value)[1:-1], json.dumps(json.dumps(value))[1:-1]):
                assert form not in scrubbed, (family, context, value, scrubbed)
        assert sum(scrubber.counts.values()) >= 1
        # The result holds nothing any rule or plugin finds, and scrubbing it again changes nothing.
        assert Scrubber().secrets(scrubbed) == [], (family, context, scrubbed)
        assert Scrubber().scrub(scrubbed) == scrubbed


def test_json_arguments_stay_json() -> None:
    text, values = FAMILIES["quoted-and-keyed"](random.Random(1))
    arguments = _contexts(text)["escaped-twice"]
    scrubbed = Scrubber().scrub(arguments)
    inner = json.loads(json.loads(scrubbed)["input"])["command"]
    assert "<REDACTED_SECRET_ASSIGNMENT>" in inner and not any(value in inner for value in values)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_private_key_read_in_two_parts_loses_both_halves(seed: int) -> None:
    head, tail, body = split_private_key(random.Random(seed))
    scrubbed = [Scrubber().scrub(part) for part in (head, tail)]
    for line in body:
        assert not any(line in part for part in scrubbed), line
    assert all("<REDACTED_PRIVATE_KEY>" in part for part in scrubbed)


def _numbered(text: str, mark: str, first: int = 1) -> str:
    """A file as a tool that numbers its lines shows it: Claude Code's Read (`     1\\t`, and
    `     1→` in older versions), `cat -n`."""
    return "".join(f"{n:6d}{mark}{line}\n" for n, line in enumerate(text.splitlines(), start=first))


@pytest.mark.parametrize("mark", ["\t", "→"], ids=["tab", "arrow"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_private_key_read_with_numbered_lines_loses_its_body(mark: str, seed: int) -> None:
    whole, body = FAMILIES["private-key"](random.Random(f"numbered-{seed}"))
    head, tail, split_body = split_private_key(random.Random(f"numbered-{seed}"))
    reads = {
        "whole": (_numbered(whole, mark), body),
        "head": (_numbered(head, mark), split_body[:3]),
        "tail": (_numbered(tail, mark, first=5), split_body[3:]),
    }
    for read, (text, values) in reads.items():
        for context, written in _contexts(text).items():
            scrubbed = Scrubber().scrub(written)
            assert "<REDACTED_PRIVATE_KEY>" in scrubbed, (read, context)
            for line in values:
                assert line not in scrubbed and json.dumps(line)[1:-1] not in scrubbed, (read, context, scrubbed)
            assert Scrubber().secrets(scrubbed) == [], (read, context, scrubbed)


def test_ordinary_code_passes_through_byte_for_byte() -> None:
    scrubber = Scrubber()
    for line in CODE.splitlines():
        assert scrubber.scrub(line) == line, line
    assert scrubber.scrub(CODE) == CODE
    assert not scrubber.counts


def test_a_literal_that_looks_like_a_secret_is_scrubbed_in_code() -> None:
    scrubbed = Scrubber().scrub('client = Client(api_key="q7Zr2Lx9Wm4Ns8Kd1Pv6", password="hunter2!")')
    assert scrubbed == 'client = Client(api_key="<REDACTED_SECRET_ASSIGNMENT>", password="<REDACTED_SECRET_ASSIGNMENT>")'


def test_a_url_credential_becomes_a_placeholder_no_detector_reads_as_one() -> None:
    scrubbed = Scrubber().scrub("origin https://bot:q7Zr2Lx9Wm4Ns8Kd@git.example.io/org/repo.git (fetch)")
    assert scrubbed == "origin https://<REDACTED_URL_CREDENTIALS>@git.example.io/org/repo.git (fetch)"
    assert list(detect(scrubbed)) == []


def test_every_text_plugin_of_detect_secrets_is_used() -> None:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    every = {plugin.__name__ for plugin in get_mapping_from_secret_type_to_class().values()}
    assert set(plugin_names()) == every - {"IPPublicDetector"}
    assert {"KeywordDetector", "Base64HighEntropyString", "HexHighEntropyString"} <= set(plugin_names())


def test_the_entropy_plugins_find_a_quoted_random_string() -> None:
    value = "9c1185a5c5e9fc54612808977ee8f548b2258d31"
    scrubber = Scrubber()
    assert scrubber.scrub(f'"sha": "{value}"') == '"sha": "<REDACTED_HEX_HIGH_ENTROPY_STRING>"'
    assert scrubber.counts == {"hex-high-entropy-string": 1}


def test_people_and_places_are_replaced_but_never_cut_a_secret_short() -> None:
    scrubber = Scrubber(host_names=("build-3.corp.example",))
    text = "alice@corp.example on build-3.corp.example in /home/alice; https://tok3nValue9x@github.com/o/r"
    assert scrubber.scrub(text) == (
        "<EMAIL> on <HOST> in /home/<USER>; https://<REDACTED_URL_CREDENTIALS>@github.com/o/r"
    )


def test_host_names_as_one_string_are_refused() -> None:
    with pytest.raises(TypeError, match="not one string"):
        Scrubber(host_names="build-3.corp.example")  # type: ignore[arg-type]


def test_an_allowed_value_is_kept_and_counted(tmp_path: Path) -> None:
    fixture = 'FAKE_TOKEN = "tok_9f8e7d6c5b4a39281706f5e4d3c2b1a0"'
    found = Scrubber().secrets(fixture)
    assert len(found) == 1
    allow = tmp_path / "allow.txt"
    allow.write_text(f"# a test fixture, checked by hand\n{found[0].hashes[0]}\n\n")
    scrubber = Scrubber(allowed=read_allowlist(allow))
    assert scrubber.scrub(fixture) == fixture
    assert scrubber.allowed_kept == {found[0].hashes[0]: 1}
    assert found[0].hashes == (value_hash("tok_9f8e7d6c5b4a39281706f5e4d3c2b1a0"),)
    # Another value is not allowed by it.
    assert scrubber.scrub(fixture.replace("9f8e", "1a2b")) != fixture.replace("9f8e", "1a2b")


def test_a_bad_allowlist_line_names_the_file_and_line(tmp_path: Path) -> None:
    allow = tmp_path / "allow.txt"
    allow.write_text("sha1:" + "a" * 40 + "\nghp_not_a_hash\n")
    with pytest.raises(ReleaseError, match=r"allow\.txt:2: 'ghp_not_a_hash' is not a finding's hash"):
        read_allowlist(allow)
    with pytest.raises(ReleaseError, match="cannot be read"):
        read_allowlist(tmp_path / "missing.txt")


def test_a_string_met_again_is_counted_again() -> None:
    # Pairs and groups repeat the SFT rows' messages: the remembered result counts each time.
    text = "export GITHUB_TOKEN=ghp_R8s7T6u5V4w3X2y1Z0a9B8c7D6e5F4g3H2i1 # set for the push to the fork"
    scrubber = Scrubber()
    assert scrubber.scrub(text) == scrubber.scrub(text)
    assert scrubber.counts == {"github-token": 2}
    fixture = 'FAKE_TOKEN = "tok_9f8e7d6c5b4a39281706f5e4d3c2b1a0" # a fixture, checked, long enough to be remembered'
    allowed = Scrubber().secrets(fixture)[0].hashes[0]
    keeping = Scrubber(allowed=frozenset({allowed}))
    assert keeping.scrub(fixture) == keeping.scrub(fixture) == fixture
    assert keeping.allowed_kept == {allowed: 2}


# The patterns of the regex plugins that detectors.PLUGIN_HINTS skips by its words, as
# detect-secrets 1.5 writes them. A release that changes them fails this test: check that each
# pattern still needs one of its plugin's words, then pin the new digest.
PINNED_PATTERNS_SHA256 = "97e4c15808ba4bf0d45a70f58a92038e817955744a9b703c7bc8cf5ea4f81b75"


def test_the_plugins_skipped_by_their_words_have_the_patterns_the_words_were_derived_from() -> None:
    import hashlib

    from rollout_assets.release.detectors import PLUGIN_HINTS, _plugins

    patterns = [
        f"{type(plugin).__name__}:{pattern.pattern}:{pattern.flags}"
        for plugin in _plugins().regex_based
        if type(plugin).__name__ in PLUGIN_HINTS
        for pattern in plugin.denylist
    ]
    assert {name.split(":", 1)[0] for name in patterns} == set(PLUGIN_HINTS)
    assert hashlib.sha256("\n".join(patterns).encode()).hexdigest() == PINNED_PATTERNS_SHA256
