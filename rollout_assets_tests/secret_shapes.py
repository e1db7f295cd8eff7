"""Secrets in the shapes coding agents meet them, each family made with fresh random values.

Each family gives a text as it appears in a transcript (a file the agent read, a command it
ran, its output) and the secret values that must not survive a release. The shapes follow the
tools' own formats: kubeconfig (`client-key-data`, `token`), `~/.docker/config.json`
(`auths.<registry>.auth`, base64 of `user:password`), `.npmrc` (`_authToken`, `_auth`), `git
remote -v` with a token, connection strings of Azure, database URLs, CLI flags.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"

Family = Callable[[random.Random], tuple[str, list[str]]]


def _word(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    # A random value that is surely random: letters and digits both present.
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            return value


def _pem(rng: random.Random, kind: str = "RSA ") -> tuple[str, list[str]]:
    body = [_word(rng, 64, B64) for _ in range(6)] + [_word(rng, 24, B64)]
    return f"-----BEGIN {kind}PRIVATE KEY-----\n" + "\n".join(body) + f"\n-----END {kind}PRIVATE KEY-----", body


def kubeconfig(rng: random.Random) -> tuple[str, list[str]]:
    key, _ = _pem(rng)
    key_data = base64.b64encode(key.encode()).decode()
    token = _word(rng, 48)
    text = (
        "users:\n- name: admin\n  user:\n    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t\n"
        f"    client-key-data: {key_data}\n- name: sa\n  user:\n    token: {token}\n"
    )
    return text, [key_data, token]


def docker_config(rng: random.Random) -> tuple[str, list[str]]:
    password = _word(rng, 20)
    auth = base64.b64encode(f"alice:{password}".encode()).decode()
    text = json.dumps({"auths": {"registry.example.io": {"auth": auth}}}, indent="\t")
    return text, [auth, password]


def npmrc(rng: random.Random) -> tuple[str, list[str]]:
    token, password = _word(rng, 36), _word(rng, 14)
    auth = base64.b64encode(f"ci:{password}".encode()).decode()
    return f"//registry.npmjs.org/:_authToken={token}\n_auth={auth}\nalways-auth=true\n", [token, auth]


def cli_passwords(rng: random.Random) -> tuple[str, list[str]]:
    values = [_word(rng, 16) for _ in range(5)]
    text = (
        f"$ docker login -u bot -p {values[0]} registry.example.io\n"
        f"$ curl -sS -u deploy:{values[1]} https://artifacts.example.io/api\n"
        f"$ mysql -h db -u root -p{values[2]} app < dump.sql\n"
        f"$ sshpass -p {values[3]} ssh deploy@10.0.0.4\n"
        f"$ psql --password={values[4]} -h db\n"
    )
    return text, values


def bare_names(rng: random.Random) -> tuple[str, list[str]]:
    values = [_word(rng, 24), _word(rng, 32), _word(rng, 12), _word(rng, 12)]
    text = f"TOKEN={values[0]}\nAPIKEY={values[1]}\nDB_PASS={values[2]}\nMYSQL_PWD={values[3]}\n"
    return text, values


def urls(rng: random.Random) -> tuple[str, list[str]]:
    redis, slashed, token, pg = _word(rng, 18), _word(rng, 8) + "/" + _word(rng, 8), _word(rng, 36), _word(rng, 16)
    text = (
        f"REDIS_URL=redis://:{redis}@cache:6379/0\n"
        f"origin\thttps://deploy:{slashed}@git.example.io/org/repo.git (fetch)\n"
        f"origin\thttps://x-access-token:ghs_{token}@github.com/org/repo.git (push)\n"
        f"DATABASE_URL=postgres://app:{pg}@db.internal:5432/app\n"
    )
    return text, [redis, slashed, token, pg, *slashed.split("/")]


def cloud_tokens(rng: random.Random) -> tuple[str, list[str]]:
    values = ["ya29." + _word(rng, 80, ALNUM + "_-"), "hvs." + _word(rng, 24), _word(rng, 43) + "=",
              _word(rng, 86) + "==", _word(rng, 43)]
    text = (
        f"gcloud auth print-access-token\n{values[0]}\n"
        f"VAULT_TOKEN is {values[1]}\n"
        f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={values[2]}\n"
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={values[3]};EndpointSuffix=core.windows.net\n"
        f"https://acct.blob.core.windows.net/c/f?sv=2022-11-02&ss=b&sig={values[4]}%3D\n"
    )
    return text, values


def webhooks(rng: random.Random) -> tuple[str, list[str]]:
    discord, slack = _word(rng, 68, ALNUM + "_-"), _word(rng, 24)
    text = (
        f"curl -X POST https://discord.com/api/webhooks/1187654321098765432/{discord} -d @msg.json\n"
        f"SLACK_URL=https://hooks.slack.com/services/T{_word(rng, 8).upper()}/B{_word(rng, 10).upper()}/{slack}\n"
    )
    return text, [discord, slack]


def vendor_tokens(rng: random.Random) -> tuple[str, list[str]]:
    values = [
        "SG." + _word(rng, 22) + "." + _word(rng, 43), "SK" + _word(rng, 32, HEX), "npm_" + _word(rng, 36),
        "glpat-" + _word(rng, 20), "pypi-AgEIcHlwaS5vcmc" + _word(rng, 80), "sk_test_" + _word(rng, 24),
        f"{rng.randint(10**8, 10**9)}:AA" + _word(rng, 33), "glsa_" + _word(rng, 32) + "_" + _word(rng, 8, HEX),
        "lin_api_" + _word(rng, 40), "xoxb-" + str(rng.randint(10**10, 10**11)) + "-" + _word(rng, 24).lower(),
    ]
    return "\n".join(f"found: {value}" for value in values) + "\n", values


def quoted_and_keyed(rng: random.Random) -> tuple[str, list[str]]:
    phrase = " ".join(_word(rng, 6, string.ascii_lowercase + "0123456789") for _ in range(4))
    api_key, secret = _word(rng, 32), _word(rng, 40)
    text = (
        f'export DB_PASSWORD="{phrase}"\n'
        f'{{"apiKey": "{api_key}", "region": "eu-west-1"}}\n'
        f"client_secret: '{secret}'\n"
    )
    return text, [phrase, api_key, secret, *phrase.split()]


def base64_token(rng: random.Random) -> tuple[str, list[str]]:
    token = "ghp_" + _word(rng, 36)
    encoded = base64.b64encode(token.encode()).decode()
    return f"$ echo $GH | base64\n{encoded}\n", [encoded, token]


def pgp_block(rng: random.Random) -> tuple[str, list[str]]:
    body = [_word(rng, 64, B64) for _ in range(5)]
    text = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + "\n".join(body) + "\n=Ab3x\n-----END PGP PRIVATE KEY BLOCK-----\n"
    return text, body


def private_key(rng: random.Random) -> tuple[str, list[str]]:
    return _pem(rng, "")


FAMILIES: dict[str, Family] = {
    "kubeconfig": kubeconfig,
    "docker-config": docker_config,
    "npmrc": npmrc,
    "cli-passwords": cli_passwords,
    "bare-names": bare_names,
    "urls": urls,
    "cloud-tokens": cloud_tokens,
    "webhooks": webhooks,
    "vendor-tokens": vendor_tokens,
    "quoted-and-keyed": quoted_and_keyed,
    "base64-token": base64_token,
    "pgp-block": pgp_block,
    "private-key": private_key,
}


def split_private_key(rng: random.Random) -> tuple[str, str, list[str]]:
    """A private key read in two parts (`head -n 4`, then `tail -n +5` of ~/.ssh/id_rsa): the
    BEGIN line in one tool output, the END line in the other."""
    key, body = _pem(rng, "OPENSSH ")
    lines = key.split("\n")
    return "\n".join(lines[:4]) + "\n", "\n".join(lines[4:]) + "\n", body


def unlisted_shapes(rng: random.Random) -> tuple[str, list[str]]:
    """Shapes beyond the usual lists: a .netrc, a session cookie, a service account's JSON
    (its key escaped inside a JSON string), and tokens of less common vendors."""
    key, body = _pem(rng, "")
    netrc, cookie, xai = _word(rng, 20), _word(rng, 32), "xai-" + _word(rng, 40).upper() + _word(rng, 40).lower()
    vendors = [
        "dapi" + _word(rng, 32, HEX), "PMAK-" + _word(rng, 24, HEX) + "-" + _word(rng, 34, HEX),
        "dp.st.dev." + _word(rng, 40), "xapp-1-A" + _word(rng, 30).upper(), "whsec_" + _word(rng, 32),
        "AGE-SECRET-KEY-1" + _word(rng, 58, string.ascii_uppercase + string.digits), xai,
    ]
    account = json.dumps({"type": "service_account", "private_key_id": _word(rng, 40, HEX), "private_key": key + "\n"})
    text = (
        f"machine api.example.io\n  login deploy\n  password {netrc}\n"
        f"> Cookie: theme=dark; sessionid={cookie}; lang=en\n"
        f"{account}\n" + "".join(f"{value}\n" for value in vendors)
    )
    return text, [netrc, cookie, *vendors, *body]


FAMILIES["unlisted-shapes"] = unlisted_shapes
