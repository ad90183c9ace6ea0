"""FAKE secrets of every public format (vendor tokens, private keys, passwords, connection
strings, commands, seed phrases...) in every placement (prose, table, code, front matter, command,
path, layout), in English, Chinese (simplified and traditional), Japanese and Korean, and benign
look-alikes of each (ids, hashes, placeholders, code, notes about secrets): issue 14's broad
corpus. `Sample`, the shape every sensitive corpus shares, is defined here.

Written before the detector was extended, from the public shapes of real formats (vendor
documentation; gitleaks' and trufflehog's rule definitions read as references for shapes only).
Every value is drawn from a seeded RNG with the right alphabet and length: no real key is in the
repository. A sample is one note (its path and text) with the values that must never show up in
search, tables, logs or output.

Split: each *template* (a format in one placement and language, or one benign look-alike) is put
in "dev" or "heldout" by a seeded hash of its id, so about a quarter of the formats are never
looked at while rules are tuned; `bench/sensitive.py` reports both parts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass

SEED = 14_2025
HELDOUT_SEED = "issue-14"

LOWER = string.ascii_lowercase
UPPER = string.ascii_uppercase
DIGITS = string.digits
ALNUM = LOWER + UPPER + DIGITS
LOWER_DIGITS = LOWER + DIGITS
UPPER_DIGITS = UPPER + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
BASE32 = UPPER + "234567"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
LANGS = ("en", "zh", "zh-Hant", "ja", "ko")


@dataclass(frozen=True)
class Sample:
    id: str  # template id + instance number: unique
    kind: str  # the format or look-alike family (rows of the per-category table)
    category: str  # the group the bench reports on
    lang: str
    placement: str  # prose | table | code | front-matter | command | path | layout
    path: str
    text: str
    secrets: tuple[str, ...]  # empty for benign samples
    split: str  # "dev" | "heldout" (and the other corpora's parts)
    # "quarantine": the note must go to the audit table; "hidden": its secret sits in a
    # `<private>` span, so the note may be indexed but the secret must reach no output.
    expect: str = "quarantine"

    @property
    def is_secret(self) -> bool:
        return bool(self.secrets)


def _r(rng: random.Random, chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _b64(rng: random.Random, nbytes: int) -> str:
    return base64.b64encode(rng.randbytes(nbytes)).decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


WORDS = (
    "river cobalt lantern maple orbit pepper quartz saddle tundra velvet walnut zephyr "
    "anchor bishop cactus dolphin ember falcon glacier harbor igloo jasmine kettle lemon"
).split()


def password(rng: random.Random) -> str:
    """What a person or a password manager makes: strong, or a word with digits and a symbol."""
    style = rng.random()
    if style < 0.5:
        core = _r(rng, ALNUM + "!#%^&*-_=+@", rng.randint(10, 16))
        return rng.choice(UPPER) + core + rng.choice(DIGITS) + rng.choice("!#%@")
    if style < 0.8:
        return rng.choice(WORDS).capitalize() + str(rng.randint(10, 9999)) + rng.choice("!#$%&*")
    return _r(rng, ALNUM, rng.randint(12, 20)) + rng.choice(DIGITS)


# --- the languages ---------------------------------------------------------------------------

INTRO = {
    "en": [
        "Notes from Tuesday's deploy; ops asked me to keep this handy until the rotation.",
        "Scratch notes for the staging box. Move these into the password manager later.",
        "Handover for the weekend on-call.",
    ],
    "zh": [
        "周二上线的记录，运维让我先记在这里。",
        "测试环境速查，之后挪到密码管理器。",
        "周末值班交接。",
    ],
    "zh-Hant": [
        "週二上線的紀錄，先記在這裡。",
        "測試環境速查表，之後移到密碼管理器。",
        "週末值班交接。",
    ],
    "ja": [
        "火曜日のデプロイのメモ。ローテーションまでここに置いておく。",
        "ステージング環境の早見表。",
        "週末の当番への引き継ぎ。",
    ],
    "ko": [
        "화요일 배포 메모. 교체할 때까지 여기 둔다.",
        "스테이징 서버 빠른 참고.",
        "주말 당직 인수인계.",
    ],
}
OUTRO = {
    "en": "Rotate after the incident review.",
    "zh": "用完记得轮换。",
    "zh-Hant": "用完記得更換。",
    "ja": "使い終わったらローテーションすること。",
    "ko": "사용 후 교체할 것.",
}
TITLE = {
    "en": "Deploy notes",
    "zh": "部署笔记",
    "zh-Hant": "部署筆記",
    "ja": "デプロイメモ",
    "ko": "배포 메모",
}
PW_LABELS = {
    "en": ["password", "Password", "db password", "admin password", "passwd", "root password"],
    "zh": ["密码", "登录密码", "数据库密码", "口令", "管理员密码", "WiFi密码"],
    "zh-Hant": ["密碼", "登入密碼", "資料庫密碼", "管理員密碼", "無線網路密碼"],
    "ja": ["パスワード", "ログインパスワード", "DBパスワード", "管理者パスワード", "暗証番号"],
    "ko": ["비밀번호", "관리자 비밀번호", "DB 비밀번호", "암호", "와이파이 비번"],
}
KEY_LABEL = {
    "en": "API key",
    "zh": "密钥",
    "zh-Hant": "金鑰",
    "ja": "APIキー",
    "ko": "API 키",
}
COLON = {"en": ": ", "zh": "：", "zh-Hant": "：", "ja": "：", "ko": ": "}


def _wrap(rng: random.Random, lang: str, body: str, title: str | None = None) -> str:
    return f"# {title or TITLE[lang]}\n\n{rng.choice(INTRO[lang])}\n\n{body}\n\n{OUTRO[lang]}\n"


# --- placements: a (label, value) pair or a raw snippet into a note ------------------------


def place(rng: random.Random, lang: str, placement: str, label: str, value: str) -> str:
    c = COLON[lang]
    if placement == "prose":
        return _wrap(rng, lang, f"{label}{c}{value}")
    if placement == "table":
        head = {"en": "| system | user | value |", "zh": "| 系统 | 用户 | 值 |"}.get(
            lang, "| system | user | value |"
        )
        return _wrap(
            rng, lang, f"{head}\n|---|---|---|\n| {label} | admin | {value} |\n| x | y | - |"
        )
    if placement == "code":
        key = label.upper().replace(" ", "_") if lang == "en" else label
        return _wrap(rng, lang, f"```ini\n{key}={value}\n```")
    if placement == "front-matter":
        key = label.replace(" ", "_")
        return f"---\ntitle: {TITLE[lang]}\ntags: [ops]\n{key}: {value}\n---\n\n{rng.choice(INTRO[lang])}\n"
    raise ValueError(placement)


# --- secret formats --------------------------------------------------------------------------
# Each maker: rng -> (label, value, extra secrets) or a full snippet via `snippet(...)`.

Maker = Callable[[random.Random], tuple[str, str]]


def _vendor() -> dict[str, tuple[str, Maker]]:
    """kind -> (category, maker returning (variable name, value))."""
    return {
        "aws-access-key-id": (
            "vendor-token",
            lambda r: ("AWS_ACCESS_KEY_ID", "AKIA" + _r(r, UPPER_DIGITS, 16)),
        ),
        "aws-secret-key": ("vendor-token", lambda r: ("aws_secret_access_key", _r(r, B64, 40))),
        "aws-session-id": (
            "vendor-token",
            lambda r: ("aws_access_key_id", "ASIA" + _r(r, UPPER_DIGITS, 16)),
        ),
        "github-classic": ("vendor-token", lambda r: ("GITHUB_TOKEN", "ghp_" + _r(r, ALNUM, 36))),
        "github-fine": (
            "vendor-token",
            lambda r: ("GH_TOKEN", "github_pat_" + _r(r, ALNUM, 22) + "_" + _r(r, ALNUM, 59)),
        ),
        "github-app": ("vendor-token", lambda r: ("token", "ghs_" + _r(r, ALNUM, 36))),
        "gitlab-pat": (
            "vendor-token",
            lambda r: ("GITLAB_TOKEN", "glpat-" + _r(r, ALNUM + "-_", 20)),
        ),
        "gitlab-runner": (
            "vendor-token",
            lambda r: ("runner token", "glrt-" + _r(r, ALNUM + "-_", 20)),
        ),
        "slack-bot": (
            "vendor-token",
            lambda r: (
                "SLACK_BOT_TOKEN",
                f"xoxb-{_r(r, DIGITS, 12)}-{_r(r, DIGITS, 13)}-{_r(r, ALNUM, 24)}",
            ),
        ),
        "slack-user": (
            "vendor-token",
            lambda r: (
                "slack",
                f"xoxp-{_r(r, DIGITS, 12)}-{_r(r, DIGITS, 12)}-{_r(r, DIGITS, 13)}-{_r(r, HEX, 32)}",
            ),
        ),
        "slack-webhook": (
            "vendor-token",
            lambda r: (
                "webhook",
                f"https://hooks.slack.com/services/T{_r(r, UPPER_DIGITS, 10)}/B{_r(r, UPPER_DIGITS, 10)}/{_r(r, ALNUM, 24)}",
            ),
        ),
        "stripe-live": (
            "vendor-token",
            lambda r: ("STRIPE_SECRET_KEY", "sk_live_" + _r(r, ALNUM, 99)),
        ),
        "stripe-test": ("vendor-token", lambda r: ("stripe key", "sk_test_" + _r(r, ALNUM, 24))),
        "stripe-restricted": ("vendor-token", lambda r: ("key", "rk_live_" + _r(r, ALNUM, 24))),
        "stripe-webhook": (
            "vendor-token",
            lambda r: ("STRIPE_WEBHOOK_SECRET", "whsec_" + _r(r, ALNUM, 32)),
        ),
        "twilio-auth-token": ("vendor-token", lambda r: ("TWILIO_AUTH_TOKEN", _r(r, HEX, 32))),
        "twilio-api-key": ("vendor-token", lambda r: ("twilio", "SK" + _r(r, HEX, 32))),
        "sendgrid": (
            "vendor-token",
            lambda r: ("SENDGRID_API_KEY", f"SG.{_r(r, B64URL, 22)}.{_r(r, B64URL, 43)}"),
        ),
        "mailgun": ("vendor-token", lambda r: ("mailgun", "key-" + _r(r, HEX, 32))),
        "mailchimp": (
            "vendor-token",
            lambda r: ("MAILCHIMP_KEY", _r(r, HEX, 32) + f"-us{r.randint(1, 20)}"),
        ),
        "npm": ("vendor-token", lambda r: ("npm token", "npm_" + _r(r, ALNUM, 36))),
        "pypi": (
            "vendor-token",
            lambda r: ("PYPI_TOKEN", "pypi-AgEIcHlwaS5vcmc" + _r(r, B64URL, 70)),
        ),
        "openai": ("vendor-token", lambda r: ("OPENAI_API_KEY", "sk-proj-" + _r(r, B64URL, 120))),
        "anthropic": (
            "vendor-token",
            lambda r: ("ANTHROPIC_API_KEY", "sk-ant-api03-" + _r(r, B64URL, 93) + "AA"),
        ),
        "google-api": ("vendor-token", lambda r: ("maps key", "AIza" + _r(r, B64URL, 35))),
        "google-oauth-secret": (
            "vendor-token",
            lambda r: ("client_secret", "GOCSPX-" + _r(r, B64URL, 28)),
        ),
        "google-refresh": (
            "vendor-token",
            lambda r: ("refresh_token", "1//0" + _r(r, B64URL, 100)),
        ),
        "azure-storage": (
            "vendor-token",
            lambda r: (
                "conn",
                f"DefaultEndpointsProtocol=https;AccountName=st{_r(r, LOWER_DIGITS, 8)};AccountKey={_b64(r, 64)};EndpointSuffix=core.windows.net",
            ),
        ),
        "azure-ad-secret": (
            "vendor-token",
            lambda r: (
                "AZURE_CLIENT_SECRET",
                _r(r, ALNUM, 3) + str(r.randint(0, 9)) + "Q~" + _r(r, ALNUM + "_~.-", 34),
            ),
        ),
        "datadog-api": ("vendor-token", lambda r: ("DD_API_KEY", _r(r, HEX, 32))),
        "datadog-app": ("vendor-token", lambda r: ("DATADOG_APP_KEY", _r(r, HEX, 40))),
        "heroku-uuid": (
            "vendor-token",
            lambda r: ("HEROKU_API_KEY", str(uuid.UUID(int=r.getrandbits(128)))),
        ),
        "heroku-v2": ("vendor-token", lambda r: ("heroku", "HRKU-AA" + _r(r, B64URL, 58))),
        "digitalocean": (
            "vendor-token",
            lambda r: ("DIGITALOCEAN_TOKEN", "dop_v1_" + _r(r, HEX, 64)),
        ),
        "vault-service": ("vendor-token", lambda r: ("VAULT_TOKEN", "hvs." + _r(r, B64URL, 91))),
        "vault-batch": ("vendor-token", lambda r: ("vault", "hvb." + _r(r, B64URL, 138))),
        "terraform-cloud": (
            "vendor-token",
            lambda r: ("TF_TOKEN", f"{_r(r, ALNUM, 14)}.atlasv1.{_r(r, B64URL, 67)}"),
        ),
        "age-key": ("vendor-token", lambda r: ("age", "AGE-SECRET-KEY-1" + _r(r, BECH32, 58))),
        "huggingface": ("vendor-token", lambda r: ("HF_TOKEN", "hf_" + _r(r, ALNUM, 34))),
        "replicate": ("vendor-token", lambda r: ("REPLICATE_API_TOKEN", "r8_" + _r(r, ALNUM, 37))),
        "groq": ("vendor-token", lambda r: ("GROQ_API_KEY", "gsk_" + _r(r, ALNUM, 52))),
        "shopify": ("vendor-token", lambda r: ("shopify admin", "shpat_" + _r(r, HEX, 32))),
        "square": ("vendor-token", lambda r: ("SQUARE_ACCESS_TOKEN", "EAAA" + _r(r, B64URL, 60))),
        "discord-webhook": (
            "vendor-token",
            lambda r: (
                "discord",
                f"https://discord.com/api/webhooks/{_r(r, DIGITS, 18)}/{_r(r, B64URL, 68)}",
            ),
        ),
        "telegram": (
            "vendor-token",
            lambda r: ("TELEGRAM_BOT_TOKEN", f"{r.randint(10**8, 10**10)}:AA{_r(r, B64URL, 33)}"),
        ),
        "atlassian": (
            "vendor-token",
            lambda r: (
                "JIRA_API_TOKEN",
                "ATATT3xFfGF0" + _r(r, B64URL, 170) + "=" + _r(r, HEX.upper(), 8),
            ),
        ),
        "linear": ("vendor-token", lambda r: ("linear", "lin_api_" + _r(r, ALNUM, 40))),
        "notion": ("vendor-token", lambda r: ("NOTION_TOKEN", "ntn_" + _r(r, ALNUM, 46))),
        "postman": (
            "vendor-token",
            lambda r: ("postman", f"PMAK-{_r(r, HEX, 24)}-{_r(r, HEX, 34)}"),
        ),
        "doppler": ("vendor-token", lambda r: ("DOPPLER_TOKEN", "dp.pt." + _r(r, ALNUM, 43))),
        "pulumi": ("vendor-token", lambda r: ("PULUMI_ACCESS_TOKEN", "pul-" + _r(r, HEX, 40))),
        "grafana": (
            "vendor-token",
            lambda r: ("grafana", f"glsa_{_r(r, ALNUM, 32)}_{_r(r, HEX, 8)}"),
        ),
        "newrelic": (
            "vendor-token",
            lambda r: ("NEW_RELIC_API_KEY", "NRAK-" + _r(r, UPPER_DIGITS, 27)),
        ),
        "sentry": (
            "vendor-token",
            lambda r: ("SENTRY_AUTH_TOKEN", "sntrys_" + _b64(r, 90).rstrip("=")),
        ),
        "databricks": ("vendor-token", lambda r: ("DATABRICKS_TOKEN", "dapi" + _r(r, HEX, 32))),
        "docker": ("vendor-token", lambda r: ("docker hub", "dckr_pat_" + _r(r, B64URL, 27))),
        "supabase": ("vendor-token", lambda r: ("supabase", "sbp_" + _r(r, HEX, 40))),
        "alibaba": ("vendor-token", lambda r: ("AccessKeyId", "LTAI5t" + _r(r, ALNUM, 18))),
        "tencent": ("vendor-token", lambda r: ("SecretId", "AKID" + _r(r, ALNUM, 32))),
        "cloudflare": ("vendor-token", lambda r: ("CLOUDFLARE_API_TOKEN", _r(r, B64URL, 40))),
        "mapbox": (
            "vendor-token",
            lambda r: ("mapbox", "sk.eyJ1Ijoi" + _r(r, B64URL, 40) + "." + _r(r, B64URL, 22)),
        ),
        "facebook": ("vendor-token", lambda r: ("FB_ACCESS_TOKEN", "EAAB" + _r(r, ALNUM, 150))),
        "firebase-fcm": (
            "vendor-token",
            lambda r: ("server key", "AAAA" + _r(r, B64URL, 7) + ":APA91b" + _r(r, B64URL, 134)),
        ),
        "okta": ("vendor-token", lambda r: ("OKTA_API_TOKEN", "00" + _r(r, B64URL, 40))),
        "algolia": ("vendor-token", lambda r: ("ALGOLIA_ADMIN_KEY", _r(r, HEX, 32))),
        "wechat": ("vendor-token", lambda r: ("AppSecret", _r(r, HEX, 32))),
        "zhipu": (
            "vendor-token",
            lambda r: ("ZHIPUAI_API_KEY", _r(r, HEX, 32) + "." + _r(r, ALNUM, 16)),
        ),
        "dashscope": ("vendor-token", lambda r: ("DASHSCOPE_API_KEY", "sk-" + _r(r, HEX, 32))),
        "line": ("vendor-token", lambda r: ("LINE_CHANNEL_ACCESS_TOKEN", _r(r, B64, 171) + "=")),
        "kakao": ("vendor-token", lambda r: ("KAKAO_REST_API_KEY", _r(r, HEX, 32))),
        "bitbucket": (
            "vendor-token",
            lambda r: ("bitbucket app password", "ATBB" + _r(r, ALNUM, 32)),
        ),
        "azure-devops": (
            "vendor-token",
            lambda r: ("AZURE_DEVOPS_PAT", _r(r, LOWER + "234567", 52)),
        ),
        "django": (
            "vendor-token",
            lambda r: (
                "SECRET_KEY",
                "django-insecure-" + _r(r, LOWER_DIGITS + "!@#$%^&*(-_=+)", 50),
            ),
        ),
        "rails": ("vendor-token", lambda r: ("secret_key_base", _r(r, HEX, 128))),
        "wireguard": ("vendor-token", lambda r: ("PrivateKey", _b64(r, 32))),
        "generic-admin": ("vendor-token", lambda r: ("ADMIN_API_KEY", _r(r, ALNUM, 40))),
        "generic-account": ("vendor-token", lambda r: ("STORAGE_ACCOUNT_KEY", _r(r, ALNUM, 40))),
        "generic-security": ("vendor-token", lambda r: ("SECURITY_TOKEN", _r(r, ALNUM + "-_", 48))),
        "generic-shared": ("vendor-token", lambda r: ("SHARED_SECRET", _r(r, ALNUM, 32))),
        "generic-typesense": ("vendor-token", lambda r: ("TYPESENSE_API_KEY", _r(r, ALNUM, 32))),
        "generic-profile": ("vendor-token", lambda r: ("PROFILE_SECRET", _r(r, ALNUM, 36))),
        "generic-min": ("vendor-token", lambda r: ("MINIO_SECRET_KEY", _r(r, ALNUM, 40))),
    }


VENDOR = _vendor()


def _pem(rng: random.Random, kind: str) -> tuple[str, str]:
    raw = _b64(rng, 48 * rng.randint(5, 9))
    body = [raw[i : i + 64] for i in range(0, len(raw), 64)]
    return "\n".join([f"-----BEGIN {kind}-----", *body, f"-----END {kind}-----"]), body[1]


def _netrc(rng: random.Random, one_line: bool) -> tuple[str, str]:
    pw = password(rng)
    host = rng.choice(["api.heroku.com", "github.com", "ftp.example-corp.net", "repo.internal"])
    user = rng.choice(["alice", "deploy", "ci-bot"])
    if one_line:
        return f"machine {host} login {user} password {pw}", pw
    return f"machine {host}\n  login {user}\n  password {pw}", pw


def _conn(rng: random.Random, shape: str) -> tuple[str, str]:
    pw = _r(rng, ALNUM + "!%^&-_", 14) + rng.choice(DIGITS)
    host = f"db-{_r(rng, LOWER_DIGITS, 5)}.corp.internal"
    return {
        "postgres": (f"postgresql://app_rw:{pw}@{host}:5432/vault", pw),
        "mysql": (f"mysql://root:{pw}@{host}:3306/shop", pw),
        "mongo": (
            f"mongodb+srv://svc:{pw}@cluster0.{_r(rng, LOWER_DIGITS, 5)}.mongodb.net/app",
            pw,
        ),
        "redis": (f"redis://:{pw}@{host}:6379/0", pw),
        "amqp": (f"amqps://rabbit:{pw}@{host}/prod", pw),
        "jdbc": (f"jdbc:postgresql://{host}:5432/app?user=app&password={pw}", pw),
        "adonet": (f"Server={host};Database=crm;User Id=sa;Password={pw};", pw),
        "dsn": (f"host={host} port=5432 dbname=app user=app password='{pw}'", pw),
        "smtp": (f"smtps://mailer:{pw}@smtp.{host}:465", pw),
        "git-https": (f"https://oauth2:{pw}@gitlab.{host}/team/repo.git", pw),
        "pgpass": (f"{host}:5432:app:app_rw:{pw}", pw),
        "cloudinary": (f"cloudinary://{_r(rng, DIGITS, 15)}:{_r(rng, B64URL, 27)}@demo-cloud", ""),
    }[shape]


def _commands(rng: random.Random, which: str) -> tuple[str, str]:
    pw = password(rng).replace("!", "9").replace("&", "8").replace("*", "7").replace("#", "6")
    return {
        "mysql-p": (f"mysql -u root -p{pw} -h db.internal shop", pw),
        "mysql-quoted": (f"mysql --user=admin --password='{pw}' crm", pw),
        "sshpass": (f"sshpass -p {pw} ssh deploy@10.0.3.7", pw),
        "curl-u": (f"curl -u admin:{pw} https://jenkins.internal/api/json", pw),
        "docker-login": (f"docker login -u ci -p {pw} registry.internal", pw),
        "redis-cli": (f"redis-cli -h cache.internal -a {pw} ping", pw),
        "htpasswd-b": (f"htpasswd -b /etc/nginx/.htpasswd alice {pw}", pw),
        "openssl-pass": (f"openssl pkcs12 -export -in c.pem -out c.p12 -passout pass:{pw}", pw),
        "smbclient": (f"smbclient //nas/share -U alice%{pw}", pw),
        "ldapsearch": (f'ldapsearch -x -D "cn=admin,dc=corp" -w {pw} -b dc=corp', pw),
        "sqlcmd": (f"sqlcmd -S db.internal -U sa -P {pw} -Q 'select 1'", pw),
        "zip-P": (f"zip -P {pw} backup.zip notes/*.md", pw),
        "wget": (f"wget --user=alice --password={pw} https://files.internal/a.tar", pw),
        "pgpassword": (f"PGPASSWORD={pw} psql -h db.internal -U app app", pw),
        "net-user": (f"net user backup {pw} /add", pw),
        "sudo-S": (f"echo '{pw}' | sudo -S systemctl restart nginx", pw),
    }[which]


PW_FORMS = ("colon", "nocolon", "copula", "table", "front-matter", "next-line", "code")


def _password_note(rng: random.Random, lang: str, form: str) -> tuple[str, str]:
    pw = password(rng)
    label = rng.choice(PW_LABELS[lang])
    c = COLON[lang]
    if form == "colon":
        body = f"{label}{c}{pw}"
    elif form == "nocolon":
        body = f"{label} {pw}"
    elif form == "copula":
        body = {
            "en": f"The {label.lower()} is {pw}, don't share it.",
            "zh": f"{label}是{pw}，别外传。",
            "zh-Hant": f"{label}是{pw}，別外傳。",
            "ja": f"{label}は{pw}です。",
            "ko": f"{label}는 {pw}입니다.",
        }[lang]
    elif form == "table":
        body = f"| 系统 | 账号 | {label} |\n|---|---|---|\n| NAS | admin | {pw} |\n| 路由器 | root | - |"
        if lang == "en":
            body = f"| system | user | {label} |\n|---|---|---|\n| NAS | admin | {pw} |"
    elif form == "front-matter":
        key = rng.choice(["password", label.replace(" ", "_")])
        return f"---\ntitle: {TITLE[lang]}\n{key}: {pw}\n---\n\n{rng.choice(INTRO[lang])}\n", pw
    elif form == "next-line":
        body = f"{label}{c.strip()}\n\n    {pw}"
    else:
        body = f"```yaml\nuser: admin\n{'password' if lang == 'en' else label}: {pw}\n```"
    return _wrap(rng, lang, body), pw


SEED_WORDS = (
    "abandon ability absorb abstract access acoustic adapt addict adjust admit advance aerobic "
    "afford agent airport alarm album alcohol alien alley alpha amateur amazing anchor ancient "
    "angle ankle announce antenna antique anxiety apology apple april arctic arena armor arrow "
    "artwork aspect asset athlete atom attitude auction august autumn avocado awesome axis "
    "bachelor bacon badge balcony bamboo banana banner barrel basket battle beach beauty bench "
    "betray bicycle biology blanket blossom bounce bracket breeze broccoli bronze bubble buffalo "
    "cabbage cactus canal candy canvas carbon castle catalog cereal chaos cherry chimney cinnamon "
    "clog cobra coconut comic copper coral cousin cradle crystal cupboard dragon drift eagle "
    "eclipse elbow embark empower engine enrich envelope erosion fabric falcon fiction flamingo"
).split()


def _seed(rng: random.Random, n: int) -> str:
    return " ".join(rng.sample(SEED_WORDS, n))


SEED_LABELS = {
    "en": "Wallet recovery phrase",
    "zh": "助记词",
    "zh-Hant": "助記詞",
    "ja": "リカバリーフレーズ",
    "ko": "복구 구문",
}


# --- building the secret samples -----------------------------------------------------------


def _split(template: str) -> str:
    digest = hashlib.sha256(f"{HELDOUT_SEED}:{template}".encode()).digest()
    return "heldout" if digest[0] % 4 == 0 else "dev"


class _Builder:
    def __init__(self) -> None:
        self.rng = random.Random(SEED)
        self.samples: list[Sample] = []
        self.counts: dict[str, int] = {}

    def add(
        self,
        template: str,
        kind: str,
        category: str,
        lang: str,
        placement: str,
        text: str,
        secrets: tuple[str, ...] | list[str],
        path: str | None = None,
    ) -> None:
        n = self.counts.get(template, 0)
        self.counts[template] = n + 1
        sid = f"{template}#{n}"
        folder = "secret" if secrets else "benign"
        name = path or f"{folder}/{lang}/{kind}-{placement}-{len(self.samples)}.md"
        self.samples.append(
            Sample(
                sid, kind, category, lang, placement, name, text, tuple(secrets), _split(template)
            )
        )


def _secret_samples(b: _Builder) -> None:
    rng = b.rng
    placements = ("prose", "code", "table", "front-matter")
    for i, (kind, (category, make)) in enumerate(VENDOR.items()):
        # Two placements per format, rotating languages, so every format appears twice.
        for j in range(2):
            lang = LANGS[(i + j) % len(LANGS)]
            placement = placements[(i + 2 * j) % len(placements)]
            label, value = make(rng)
            if kind == "azure-storage":
                secret = value.split("AccountKey=")[1].split(";")[0]
                text = _wrap(rng, lang, f"```\n{value}\n```")
                b.add(f"{kind}/{placement}", kind, category, lang, "code", text, [secret])
                continue
            if placement in ("prose", "table") and lang != "en" and j == 1:
                label = f"{KEY_LABEL[lang]} ({label})"
            text = place(rng, lang, placement, label, value)
            b.add(f"{kind}/{placement}", kind, category, lang, placement, text, [value])
    # Vendor tokens in plain prose with no label at all (the format alone must tell).
    for kind in (
        "npm",
        "stripe-test",
        "digitalocean",
        "vault-service",
        "age-key",
        "github-classic",
        "slack-bot",
        "openai",
        "huggingface",
        "sendgrid",
    ):
        lang = rng.choice(LANGS)
        value = VENDOR[kind][1](rng)[1]
        sentence = {
            "en": f"I pasted {value} into the CI settings yesterday.",
            "zh": f"昨天把 {value} 填进了 CI 配置。",
            "zh-Hant": f"昨天把 {value} 填進了 CI 設定。",
            "ja": f"昨日 {value} を CI の設定に貼った。",
            "ko": f"어제 {value} 를 CI 설정에 넣었다.",
        }[lang]
        b.add(
            f"{kind}/bare-prose",
            kind,
            "vendor-token",
            lang,
            "prose",
            _wrap(rng, lang, sentence),
            [value],
        )

    # Azure SAS and Service Bus, OAuth code, JWT, bearer, basic header, TOTP seed.
    for lang in ("en", "ja", "zh"):
        sig = base64.b64encode(rng.randbytes(32)).decode()
        enc = sig.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
        url = (
            f"https://st{_r(rng, LOWER_DIGITS, 8)}.blob.core.windows.net/backups?sv=2022-11-02&ss=b"
            f"&srt=co&sp=rl&se=2026-01-01T00:00:00Z&spr=https&sig={enc}"
        )
        b.add(
            "azure-sas/url",
            "azure-sas",
            "vendor-token",
            lang,
            "prose",
            _wrap(rng, lang, url),
            [enc],
        )
        key = base64.b64encode(rng.randbytes(32)).decode()
        sb = (
            f"Endpoint=sb://ns-{_r(rng, LOWER, 6)}.servicebus.windows.net/;"
            f"SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={key}"
        )
        b.add(
            "azure-servicebus/code",
            "azure-servicebus",
            "vendor-token",
            lang,
            "code",
            _wrap(rng, lang, f"```\n{sb}\n```"),
            [key],
        )
        code = "4/0A" + _r(rng, B64URL, 60)
        cb = f"https://app.internal/oauth/callback?code={code}&scope=email%20profile&state={_r(rng, ALNUM, 12)}"
        b.add(
            "oauth-code/url",
            "oauth-code",
            "vendor-token",
            lang,
            "prose",
            _wrap(rng, lang, cb),
            [code],
        )
    for lang in LANGS:
        header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        payload = _b64url(
            json.dumps(
                {"sub": str(rng.randint(10**6, 10**7)), "iat": rng.randint(10**9, 2 * 10**9)}
            ).encode()
        )
        jwt = f"{header}.{payload}.{_b64url(rng.randbytes(32))}"
        b.add(
            "jwt/header",
            "jwt",
            "token-header",
            lang,
            "command",
            _wrap(
                rng,
                lang,
                f"```\ncurl -H 'Authorization: Bearer {jwt}' https://api.internal/v1/me\n```",
            ),
            [jwt],
        )
    for lang in ("en", "ko"):
        opaque = _r(rng, ALNUM, 40)
        b.add(
            "bearer/opaque",
            "bearer",
            "token-header",
            lang,
            "code",
            _wrap(
                rng, lang, f"```http\nGET /v2/items HTTP/1.1\nAuthorization: Bearer {opaque}\n```"
            ),
            [opaque],
        )
        basic = base64.b64encode(f"admin:{password(rng)}".encode()).decode()
        b.add(
            "basic-header/code",
            "basic-header",
            "token-header",
            lang,
            "code",
            _wrap(rng, lang, f"```\nAuthorization: Basic {basic}\n```"),
            [basic],
        )
        totp = _r(rng, BASE32, 32)
        b.add(
            "totp/url",
            "totp-seed",
            "token-header",
            lang,
            "prose",
            _wrap(rng, lang, f"otpauth://totp/Corp:alice?secret={totp}&issuer=Corp"),
            [totp],
        )

    # Private keys.
    for kind, label in (
        ("RSA PRIVATE KEY", "rsa"),
        ("OPENSSH PRIVATE KEY", "openssh"),
        ("EC PRIVATE KEY", "ec"),
        ("PGP PRIVATE KEY BLOCK", "pgp"),
        ("PRIVATE KEY", "pkcs8"),
    ):
        for lang in rng.sample(LANGS, 2):
            pem, secret = _pem(rng, kind)
            b.add(
                f"private-key/{label}",
                f"private-key-{label}",
                "private-key",
                lang,
                "code",
                _wrap(rng, lang, f"```\n{pem}\n```"),
                [secret],
            )
    putty = "PuTTY-User-Key-File-3: ssh-rsa\nEncryption: none\nComment: deploy\nPublic-Lines: 2\n"
    pub, priv = _b64(rng, 48), _b64(rng, 96)
    b.add(
        "private-key/putty",
        "private-key-putty",
        "private-key",
        "en",
        "code",
        _wrap(
            rng,
            "en",
            f"```\n{putty}{pub}\nPrivate-Lines: 2\n{priv}\nPrivate-MAC: {_r(rng, HEX, 64)}\n```",
        ),
        [priv],
    )
    pem, secret = _pem(rng, "PRIVATE KEY")
    sa = json.dumps(
        {
            "type": "service_account",
            "project_id": "proj-x",
            "private_key_id": _r(rng, HEX, 40),
            "private_key": pem + "\n",
            "client_email": "svc@proj-x.iam.gserviceaccount.com",
        },
        indent=2,
    )
    b.add(
        "private-key/gcp-json",
        "gcp-service-account",
        "private-key",
        "zh",
        "code",
        _wrap(rng, "zh", f"```json\n{sa}\n```"),
        [secret],
    )

    # Connection strings.
    for i, shape in enumerate(
        (
            "postgres",
            "mysql",
            "mongo",
            "redis",
            "amqp",
            "jdbc",
            "adonet",
            "dsn",
            "smtp",
            "git-https",
            "pgpass",
        )
    ):
        for j in range(2):
            lang = LANGS[(i + j) % len(LANGS)]
            snippet, pw = _conn(rng, shape)
            text = _wrap(
                rng,
                lang,
                f"DATABASE_URL={snippet}"
                if j == 0 and "://" in snippet
                else f"```\n{snippet}\n```",
            )
            b.add(
                f"conn/{shape}",
                f"conn-{shape}",
                "connection-string",
                lang,
                "code" if j else "prose",
                text,
                [pw],
            )

    # .netrc lines, both layouts.
    for one_line in (True, False):
        for lang in ("en", "zh"):
            snippet, pw = _netrc(rng, one_line)
            b.add(
                f"netrc/{'line' if one_line else 'block'}",
                "netrc",
                "connection-string",
                lang,
                "code",
                _wrap(rng, lang, f"```\n{snippet}\n```"),
                [pw],
            )

    # Passwords in commands.
    for i, which in enumerate(
        (
            "mysql-p",
            "mysql-quoted",
            "sshpass",
            "curl-u",
            "docker-login",
            "redis-cli",
            "htpasswd-b",
            "openssl-pass",
            "smbclient",
            "ldapsearch",
            "sqlcmd",
            "zip-P",
            "wget",
            "pgpassword",
            "net-user",
            "sudo-S",
        )
    ):
        lang = LANGS[i % len(LANGS)]
        cmd, pw = _commands(rng, which)
        fenced = i % 2 == 0
        body = f"```bash\n$ {cmd}\n```" if fenced else f"Ran `{cmd}` and it worked."
        b.add(
            f"command/{which}",
            f"cmd-{which}",
            "password-command",
            lang,
            "command",
            _wrap(rng, lang, body),
            [pw],
        )

    # Passwords in prose, tables, front matter, in every language and layout.
    for lang in LANGS:
        for form in PW_FORMS:
            text, pw = _password_note(rng, lang, form)
            b.add(f"password/{lang}/{form}", f"password-{form}", "password", lang, form, text, [pw])
    for label in ("pw", "passcode", "PIN", "passphrase", "Kennwort"):
        pw = password(rng) if label != "PIN" else str(rng.randint(100000, 999999))
        b.add(
            f"password/en/{label}",
            f"password-{label}",
            "password",
            "en",
            "prose",
            _wrap(rng, "en", f"{label}: {pw}"),
            [pw],
        )

    # Encodings and layouts.
    for lang in ("en", "zh", "ko"):
        url, pw = _conn(rng, "postgres")
        enc = base64.b64encode(url.encode()).decode()
        k8s = f"```yaml\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  url: {enc}\n```"
        b.add(
            "encoding/base64-url",
            "base64-connection",
            "encoding",
            lang,
            "code",
            _wrap(rng, lang, k8s),
            [pw, enc],
        )
        key = "sk-proj-" + _r(rng, B64URL, 120)
        split = f"```\nOPENAI_API_KEY={key[:64]}\n{key[64:]}\n```"
        b.add(
            "layout/split-key",
            "split-key",
            "encoding",
            lang,
            "code",
            _wrap(rng, lang, split),
            [key[:64], key[64:]],
        )
        aws = _r(rng, B64, 40)
        wrapped = f'secret = "{aws[:20]}" \\\n    "{aws[20:]}"'
        b.add(
            "layout/split-concat",
            "split-concat",
            "encoding",
            lang,
            "code",
            _wrap(rng, lang, f"```python\n{wrapped}\n```"),
            [aws[:20] + aws[20:]],
        )
    for lang in LANGS:
        n = rng.choice([12, 24])
        phrase = _seed(rng, n)
        b.add(
            "seed/labelled",
            "seed-phrase",
            "encoding",
            lang,
            "prose",
            _wrap(rng, lang, f"{SEED_LABELS[lang]}：\n\n{phrase}"),
            [phrase],
        )
    numbered = "\n".join(f"{i}. {w}" for i, w in enumerate(rng.sample(SEED_WORDS, 12), 1))
    b.add(
        "seed/numbered",
        "seed-phrase",
        "encoding",
        "en",
        "prose",
        _wrap(rng, "en", f"Ledger backup words:\n\n{numbered}"),
        [numbered.split("\n")[0]],
    )
    bare = _seed(rng, 12)
    b.add(
        "seed/bare",
        "seed-phrase",
        "encoding",
        "en",
        "code",
        _wrap(rng, "en", f"```\n{bare}\n```"),
        [bare],
    )

    # Paths: folders and names that are secret by nature, and tokens in file names.
    for folder, lang in (
        ("secrets", "en"),
        ("私密", "zh"),
        ("Secrets", "ja"),
        ("機密", "zh-Hant"),
        (".secrets", "ko"),
    ):
        pin = str(rng.randint(1000, 9999))
        body = {
            "en": f"bank card pin {pin}",
            "zh": f"银行卡 {pin}",
            "ja": f"カード {pin}",
            "zh-Hant": f"銀行卡 {pin}",
            "ko": f"카드 {pin}",
        }[lang]
        b.add(
            f"path/folder-{folder}",
            "secret-folder",
            "path",
            lang,
            "path",
            _wrap(rng, lang, body),
            [],
            path=f"{folder}/bank-{len(b.samples)}.md",
        )
        b.samples[-1] = _with_secrets(b.samples[-1], (f"{body}",))
    for name, lang in (
        ("env.local.md", "en"),
        (".env.production", "en"),
        ("credentials.md", "en"),
        ("credentials-prod.md", "zh"),
        (".netrc", "en"),
        ("prod.env.md", "ja"),
        ("id_ed25519", "en"),
    ):
        b.add(
            f"path/name-{name}",
            "secret-filename",
            "path",
            lang,
            "path",
            _wrap(rng, lang, f"login: alice / {password(rng)}"),
            [],
            path=f"ops/{name}",
        )
        b.samples[-1] = _with_secrets(
            b.samples[-1], (b.samples[-1].text.split("/ ")[1].split("\n")[0],)
        )
    for kind in ("github-classic", "stripe-live", "slack-bot"):
        value = VENDOR[kind][1](rng)[1]
        b.add(
            f"path/token-{kind}",
            "token-in-filename",
            "path",
            "en",
            "path",
            _wrap(rng, "en", "Token for the release bot, see file name."),
            [value],
            path=f"ops/{value}.md",
        )

    # Explicit markers the parser must not lose: malformed front matter with `private: true`.
    for lang, title in (
        ("en", "Diary: day one: rain"),
        ("zh", "日记：第一天：下雨"),
        ("ja", "日記：一日目"),
        ("ko", "일기: 첫째 날: 비"),
    ):
        body = f"Met {rng.choice(['Dr. Okafor', 'Zebediah', 'Mirela'])} about the results."
        text = f"---\ntitle: {title}\nprivate: true\n\ttags: [x]\n---\n\n{body}\n"
        b.add(
            "marker/malformed-private",
            "malformed-private",
            "private-marker",
            lang,
            "front-matter",
            text,
            [body],
        )
    text = (
        '---\ntitle: "unclosed\ntags: [private, health]\n---\n\nBlood test results, see attached.\n'
    )
    b.add(
        "marker/malformed-tag",
        "malformed-private",
        "private-marker",
        "en",
        "front-matter",
        text,
        ["Blood test results"],
    )


def _with_secrets(s: Sample, secrets: tuple[str, ...]) -> Sample:
    return Sample(s.id, s.kind, s.category, s.lang, s.placement, s.path, s.text, secrets, s.split)


# --- benign look-alikes ----------------------------------------------------------------------


def _benign_samples(b: _Builder) -> None:  # noqa: PLR0915 - a flat list of look-alikes
    rng = b.rng

    def add(kind: str, category: str, lang: str, text: str, path: str | None = None) -> None:
        b.add(f"benign/{kind}/{lang}", kind, category, lang, "prose", text, [], path=path)

    for lang in LANGS:
        sha = _r(rng, HEX, 40)
        digest = hashlib.sha256(rng.randbytes(8)).hexdigest()
        u = str(uuid.UUID(int=rng.getrandbits(128)))
        w = lambda body, lang=lang: _wrap(rng, lang, body, "Notes")  # noqa: E731
        add("git-sha", "hash", lang, w(f"commit {sha}\nAuthor: Ann <ann@x.org>\n\nfix: {sha[:7]}"))
        add("sha256", "hash", lang, w(f"```\nsha256sum: {digest}\n```"))
        add("docker-digest", "hash", lang, w(f"image: postgres@sha256:{digest}"))
        add("uuid-table", "uuid", lang, w(f"| id | name |\n|---|---|\n| {u} | alpha |"))
        add("request-id", "uuid", lang, w(f"request_id: {u}\ntrace_id: {_r(rng, HEX, 32)}"))
        add(
            "aws-ids",
            "id",
            lang,
            w(f"account 123456789012, instance i-0{_r(rng, HEX, 16)}, subnet-{_r(rng, HEX, 17)}"),
        )
        add(
            "arn",
            "id",
            lang,
            w(f"arn:aws:iam::{_r(rng, DIGITS, 12)}:role/deploy-{_r(rng, LOWER, 5)}"),
        )
        add("publishable", "id", lang, w(f"STRIPE_PUBLISHABLE_KEY=pk_test_{_r(rng, ALNUM, 24)}"))
        add("twilio-sid", "id", lang, w(f"TWILIO_ACCOUNT_SID=AC{_r(rng, HEX, 32)}"))
        add(
            "google-client-id",
            "id",
            lang,
            w(
                f"client_id: {_r(rng, DIGITS, 12)}-{_r(rng, LOWER_DIGITS, 32)}.apps.googleusercontent.com"
            ),
        )
        add(
            "public-key",
            "public-key",
            lang,
            w(f"public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{_b64(rng, 32)[:43]} ann@laptop"),
        )
        add(
            "certificate",
            "public-key",
            lang,
            w(f"-----BEGIN CERTIFICATE-----\n{_b64(rng, 48)}\n-----END CERTIFICATE-----"),
        )
        png = base64.b64encode(b"\x89PNG" + rng.randbytes(200)).decode()
        add("image", "encoding", lang, w(f"![logo](data:image/png;base64,{png})"))
        add("sri", "hash", lang, w(f'"integrity": "sha512-{_b64(rng, 64)}"'))

    # Placeholders and documentation examples.
    placeholders = [
        ("password-angle", "password: <your password>"),
        ("password-env", "password: ${DB_PASSWORD}\nsecret: {{ vault_secret }}"),
        ("password-changeme", "password: changeme\napi_key: your-api-key-here\ntoken: xxxxxxxx"),
        ("password-stars", 'PGPASSWORD="********" psql -h localhost'),
        (
            "aws-example",
            "AWS docs use AKIAIOSFODNN7EXAMPLE and wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY.",
        ),
        (
            "slack-placeholder",
            "Webhook: https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        ),
        ("github-placeholder", "GITHUB_TOKEN=ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"),
        ("stripe-placeholder", "STRIPE_SECRET_KEY=sk_test_xxxxxxxxxxxxxxxxxxxxxxxx"),
        ("vault-placeholder", "export VAULT_TOKEN=hvs.EXAMPLE"),
        ("url-placeholder", "postgresql://user:password@localhost:5432/mydb"),
        ("url-default", "DATABASE_URL=postgres://postgres:postgres@localhost:5432/app"),
        ("url-var", "redis://:${REDIS_PASSWORD}@cache:6379"),
        ("curl-placeholder", "curl -u {{username}}:{{password}} https://api.example.com"),
        ("sshpass-placeholder", "sshpass -p '<password>' ssh user@host"),
        ("mysql-prompt", "mysql -u root -p shop   # prompts for the password"),
        ("mysql-env", 'mysql -u app -p"$MYSQL_PASSWORD" app'),
        ("docker-env", "echo $TOKEN | docker login -u ci --password-stdin registry.internal"),
        ("medusa", "medusa -h host -u admin -P passwords.txt -M ssh\nmedusa -m PASS:HASH"),
        ("htpasswd-create", "htpasswd -c /etc/nginx/.htpasswd alice   # asks for the password"),
        (
            "jwt-io",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c is jwt.io's example token.",
        ),
        ("bearer-var", 'curl -H "Authorization: Bearer $TOKEN" https://api.x.org'),
        ("bearer-angle", "Send `Authorization: Bearer <token>` with every request."),
        ("zh-placeholder", "密码：<你的密码>\n密钥：请向管理员申请"),
        ("zh-hant-placeholder", "密碼：********\n金鑰：（另行提供）"),
        ("ja-placeholder", "パスワード：＊＊＊＊＊＊\nAPIキー：YOUR_API_KEY"),
        ("ko-placeholder", "비밀번호: (생략)\nAPI 키: <발급받은 키>"),
        ("netrc-placeholder", "machine api.example.com login USER password PASSWORD"),
        ("env-template", "OPENAI_API_KEY=\nANTHROPIC_API_KEY=your-key-here\nSECRET_KEY=change-me"),
        ("yaml-schema", "password:\n  type: string\n  required: true\n  minLength: 8"),
    ]
    for kind, body in placeholders:
        add(kind, "placeholder", "en", _wrap(rng, "en", body, "Setup"))

    # Code that names secrets without holding one.
    code = [
        ("django-call", "```python\nSECRET_KEY = get_random_secret_key()\n```"),
        (
            "env-lookup",
            '```python\npassword = os.environ["DB_PASSWORD"]\napi_key = os.getenv("OPENAI_API_KEY")\n```',
        ),
        (
            "request-form",
            '```python\npassword = request.form["password"]\ntoken = jwt.encode(payload, key)\n```',
        ),
        (
            "settings-attr",
            "```python\nclient = Client(api_key=settings.API_KEY, secret=config.SECRET)\n```",
        ),
        (
            "java-class",
            "key: AbstractSingletonProxyFactoryBeanRegistry\nvalue: DefaultListableBeanFactory",
        ),
        ("typed", "```python\ndef login(user: str, password: str) -> bool: ...\n```"),
        ("compare", "```python\nif password == confirm:\n    save(user, password=password)\n```"),
        ("sql-param", "```sql\nALTER USER app WITH PASSWORD :'new_password';\n```"),
        ("k8s-ref", "secretKeyRef:\n  name: db\n  key: password\nsecretName: tls-cert"),
        ("token-limits", "max_tokens: 4096\ntoken_limit: 8000\npassword_min_length: 12"),
        (
            "session-ids",
            f"session_id: {uuid.UUID(int=rng.getrandbits(128))}\netag: {_r(rng, HEX, 32)}",
        ),
        ("cache-key", 'cache_key: v1-deps-{{ checksum "poetry.lock" }}'),
        ("hash-names", f'commit_sha = "{_r(rng, HEX, 40)}"\nfile_hash: {_r(rng, HEX, 64)}'),
        ("css", ".btn { color: #1e90ff; background: #ff6347; border: 1px solid #2e8b57; }"),
        ("hashed", "password: hashed\nsalt: per-user\nalgorithm: argon2id"),
        (
            "bcrypt-table",
            "| field | storage |\n|---|---|\n| password | bcrypt |\n| email | plain |",
        ),
        ("bcrypt-hash", "Example bcrypt output: $2b$12$" + _r(rng, ALNUM + "./", 53)),
        ("secret-key-setting", "SECRET_KEY is read from the environment; never commit it."),
        ("api-key-doc", "Pass the API key in the `X-Api-Key` header; keys start with `sk_live_`."),
        ("camel-token", "tokenizerConfig: SentencePieceBPETokenizerFast"),
    ]
    for kind, body in code:
        add(kind, "code", "en", _wrap(rng, "en", body, "Code notes"))

    # Notes about passwords and cryptography, in every language, some with telling file names.
    about = [
        (
            "en",
            "password-manager-comparison.md",
            "| manager | price | passkeys |\n|---|---|---|\n| 1Password | $2.99 | yes |\n| Bitwarden | $0.83 | yes |\n| KeePassXC | free | no |",
        ),
        (
            "en",
            "secret-santa-2025.md",
            "Secret Santa: budget $30, draw on Dec 1st. Alice -> Bob, Bob -> Chen.",
        ),
        (
            "en",
            "private-key-infrastructure.md",
            "PKI: a root CA signs intermediates; RSA-2048 or P-256 keys; rotate every 397 days.",
        ),
        (
            "en",
            "passwd.md",
            "`passwd` changes a user's password. `passwd -l user` locks the account.",
        ),
        (
            "en",
            "htpasswd.md",
            "`htpasswd -c .htpasswd alice` creates the file and asks for the password (bcrypt with -B).",
        ),
        (
            "en",
            "password-policy.md",
            "Password policy: at least 12 characters, no rotation unless compromised (NIST 800-63B).",
        ),
        (
            "en",
            "reset.md",
            "Password: reset it via the portal, then log in again. The secret is to keep it simple.",
        ),
        (
            "en",
            "secrets-management-talk.md",
            "Talk notes: Vault, SOPS and sealed-secrets; AES-256-GCM and X25519 keys.",
        ),
        (
            "zh",
            "密码学笔记.md",
            "今天学习了密码学：AES-128、RSA-2048、SHA-256 和 ECDSA。\n密码：bcrypt 加盐哈希存储",
        ),
        (
            "zh",
            "密码策略.md",
            "密码至少 8 位，需包含数字和字母。请勿把密码写在笔记里。忘记密码请点击“忘记密码”。",
        ),
        (
            "zh",
            "修改密码.md",
            "修改密码的步骤：\n1. 打开设置\n2. 点击“安全”\n3. 输入旧密码和新密码",
        ),
        ("zh", "私钥管理.md", "私钥要离线保存，助记词抄在纸上，不要拍照。"),
        (
            "zh-Hant",
            "密碼學入門.md",
            "密碼學入門：對稱加密（AES）、非對稱加密（RSA、ECC）、雜湊（SHA-256）。",
        ),
        ("zh-Hant", "密碼政策.md", "密碼長度至少 12 個字元，密碼：請使用密碼管理器產生。"),
        (
            "ja",
            "パスワード管理のコツ.md",
            "パスワードは使い回さない。パスワード管理ソフト（1Password、Bitwarden）を使う。",
        ),
        (
            "ja",
            "暗号化メモ.md",
            "暗号化：AES-256-GCM、鍵交換は X25519、署名は Ed25519。パスワード：ハッシュ化して保存。",
        ),
        (
            "ja",
            "秘密鍵の扱い.md",
            "秘密鍵は 600 のパーミッションで保存する。パスフレーズを必ず設定する。",
        ),
        (
            "ko",
            "비밀번호-정책.md",
            "비밀번호는 12자 이상, 특수문자 포함. 비밀번호: 해시(bcrypt)로 저장.",
        ),
        ("ko", "암호학-노트.md", "암호학 노트: 대칭키(AES), 공개키(RSA, ECC), 해시(SHA-256)."),
        ("ko", "계정-복구.md", "비밀번호를 잊어버렸다면 '비밀번호 찾기'를 누르세요."),
    ]
    for lang, name, body in about:
        add(
            f"about-{name}",
            "about-secrets",
            lang,
            _wrap(rng, lang, body, name[:-3]),
            path=f"topics/{name}",
        )

    # Prose that mentions keys, tokens and seeds.
    prose = [
        ("en", "A mnemonic for the planets: My Very Educated Mother Just Served Us Nine Pizzas."),
        ("en", "Token: a unit of text in NLP. The tokenizer splits words into subword tokens."),
        ("en", "The key insight: caching by content hash means a rename re-embeds nothing."),
        (
            "en",
            "Shopping: apple banana cherry lemon pepper walnut coconut cabbage bacon candy cereal",
        ),
        ("en", "Recovery plan: restore from the nightly backup, then replay the WAL."),
        ("zh", "助记词是什么？就是钱包的 12 个英文单词，丢了就找不回资产。"),
        ("zh", "令牌桶算法：每秒补充 100 个令牌，突发上限 200。"),
        ("zh-Hant", "權杖（token）過期後需要重新登入。"),
        ("ja", "トークンの有効期限は 1 時間。リフレッシュトークンで更新する。"),
        ("ja", "合言葉は「山」と「川」。子どもの頃の遊び。"),
        ("ko", "토큰 버킷 알고리즘: 초당 100개 토큰을 채운다."),
        ("ko", "키 포인트: 캐시는 내용 해시로 찾는다."),
    ]
    for i, (lang, body) in enumerate(prose):
        add(f"prose-{i}", "prose", lang, _wrap(rng, lang, body, "Notes"))

    # High-entropy values that are not secrets.
    for lang in ("en", "zh", "ja"):
        add(
            "ipfs",
            "id",
            lang,
            _wrap(
                rng,
                lang,
                f"CID: Qm{_r(rng, B64URL.replace('-', '').replace('_', ''), 44)}",
                "Notes",
            ),
        )
        add(
            "eth-address", "id", lang, _wrap(rng, lang, f"donations: 0x{_r(rng, HEX, 40)}", "Notes")
        )
        add(
            "btc-address", "id", lang, _wrap(rng, lang, f"bc1q{_r(rng, LOWER_DIGITS, 38)}", "Notes")
        )
        add(
            "youtube",
            "id",
            lang,
            _wrap(rng, lang, f"https://www.youtube.com/watch?v={_r(rng, B64URL, 11)}", "Notes"),
        )
        add(
            "gpg-fpr",
            "public-key",
            lang,
            _wrap(
                rng,
                lang,
                "Key fingerprint = " + " ".join(_r(rng, HEX.upper(), 4) for _ in range(10)),
                "Notes",
            ),
        )
        add(
            "release-key",
            "hash",
            lang,
            _wrap(
                rng,
                lang,
                f"release_key_id: {_r(rng, HEX, 16)}\nchecksum: {_r(rng, HEX, 64)}",
                "Notes",
            ),
        )
        add(
            "otp-doc",
            "placeholder",
            lang,
            _wrap(
                rng,
                lang,
                "otpauth://totp/Example:alice@example.com?secret=<BASE32SECRET>&issuer=Example",
                "Notes",
            ),
        )


def formats_corpus() -> list[Sample]:
    """Every sample, secrets first; deterministic (the seed, not the clock)."""
    b = _Builder()
    _secret_samples(b)
    _benign_samples(b)
    return b.samples


def secrets_of(samples: list[Sample]) -> list[Sample]:
    return [s for s in samples if s.is_secret]


def benign_of(samples: list[Sample]) -> list[Sample]:
    return [s for s in samples if not s.is_secret]
