"""FAKE secret values (`fake_aws`, `fake_password`, ...) and a small English and Chinese set of
notes holding them, with benign look-alikes: for the policy, triage, ingest and output tests.

Every secret is made at import-free call time from a seeded RNG, so the repository holds no
literal key that looks real (and secret scanners on the repo stay quiet). The ingest tests reuse
`secret_notes()` / `benign_notes()` to check that flagged notes never reach the search table.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import string
import uuid
from collections.abc import Callable

SEED = 20240611
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
LOWER_DIGITS = string.ascii_lowercase + string.digits
B64 = string.ascii_letters + string.digits + "+/"
PASSWORD_CHARS = string.ascii_letters + string.digits + "!#%^&-_=+"

# (text, secret values), built from the RNG
Snippet = tuple[str, list[str]]


def _rand(rng: random.Random, chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def fake_password(rng: random.Random) -> str:
    core = _rand(rng, PASSWORD_CHARS, rng.randint(9, 15))
    # Always a letter, a digit and a symbol, like a password manager would make.
    return rng.choice(string.ascii_uppercase) + core + rng.choice(string.digits) + rng.choice("!#%")


def fake_aws(rng: random.Random) -> tuple[str, str]:
    return "AKIA" + _rand(rng, UPPER_DIGITS, 16), _rand(rng, B64, 40)


def fake_github(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "ghp_" + _rand(rng, ALNUM, 36)
    return "github_pat_" + _rand(rng, ALNUM, 22) + "_" + _rand(rng, ALNUM, 59)


def fake_slack(rng: random.Random) -> str:
    return f"xoxb-{_rand(rng, string.digits, 12)}-{_rand(rng, string.digits, 13)}-" + _rand(
        rng, ALNUM, 24
    )


def fake_stripe(rng: random.Random) -> str:
    return "sk_live_" + _rand(rng, ALNUM, 24)


def fake_jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(
        json.dumps(
            {"sub": str(rng.randint(10**6, 10**7)), "iat": rng.randint(10**9, 2 * 10**9)}
        ).encode()
    )
    signature = _b64url(rng.randbytes(32))
    return f"{header}.{payload}.{signature}"


def fake_pem_body(rng: random.Random) -> list[str]:
    raw = base64.b64encode(rng.randbytes(48 * rng.randint(4, 8))).decode()
    return [raw[i : i + 64] for i in range(0, len(raw), 64)]


def fake_azure_key(rng: random.Random) -> str:
    return base64.b64encode(rng.randbytes(64)).decode()  # 88 characters


def fake_openai(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "sk-proj-" + _rand(rng, ALNUM + "-_", 48) + _rand(rng, ALNUM, 8)
    return "sk-" + _rand(rng, ALNUM, 20) + "T3BlbkFJ" + _rand(rng, ALNUM, 20)


def fake_anthropic(rng: random.Random) -> str:
    return "sk-ant-api03-" + _rand(rng, ALNUM + "-_", 93) + "AA"


def fake_google(rng: random.Random) -> str:
    return "AIza" + _rand(rng, ALNUM + "-_", 35)


def fake_gitlab(rng: random.Random) -> str:
    return "glpat-" + _rand(rng, ALNUM, 20)


def fake_hex(rng: random.Random, n: int) -> str:
    return _rand(rng, "0123456789abcdef", n)


# --- secret snippets -------------------------------------------------------------------------
# Each returns (snippet, secrets); `zh` picks Chinese labels. Snippets are single logical units
# that the placements below put in prose, code fences, tables or front matter.


def s_aws(rng: random.Random, zh: bool) -> Snippet:
    key, secret = fake_aws(rng)
    return f'aws_access_key_id = {key}\naws_secret_access_key = "{secret}"', [key, secret]


def s_github(rng: random.Random, zh: bool) -> Snippet:
    token = fake_github(rng)
    return f"GITHUB_TOKEN={token}", [token]


def s_slack(rng: random.Random, zh: bool) -> Snippet:
    token = fake_slack(rng)
    return f"slack_bot_token: {token}", [token]


def s_stripe(rng: random.Random, zh: bool) -> Snippet:
    key = fake_stripe(rng)
    return f"STRIPE_API_KEY={key}", [key]


def s_jwt(rng: random.Random, zh: bool) -> Snippet:
    token = fake_jwt(rng)
    return f"Authorization: Bearer {token}", [token]


def s_pem(rng: random.Random, zh: bool) -> Snippet:
    body = fake_pem_body(rng)
    kind = rng.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY"])
    text = "\n".join([f"-----BEGIN {kind}-----", *body, f"-----END {kind}-----"])
    return text, [body[0]]


def s_gcp(rng: random.Random, zh: bool) -> Snippet:
    body = fake_pem_body(rng)
    pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END PRIVATE KEY-----\n"
    project = f"proj-{_rand(rng, LOWER_DIGITS, 6)}"
    doc = {
        "type": "service_account",
        "project_id": project,
        "private_key_id": fake_hex(rng, 40),
        "private_key": pem,
        "client_email": f"svc@{project}.iam.gserviceaccount.com",
        "client_id": str(rng.randint(10**20, 10**21)),
    }
    return json.dumps(doc, indent=2), [body[0]]


def s_conn(rng: random.Random, zh: bool) -> Snippet:
    pw = _rand(rng, ALNUM + "!%^&-_", 14) + rng.choice(string.digits)
    host = f"db-{_rand(rng, LOWER_DIGITS, 5)}.corp.internal"
    url = rng.choice(
        [
            f"postgresql://app_rw:{pw}@{host}:5432/vault",
            f"postgres://analytics:{pw}@{host}/warehouse?sslmode=require",
            f"mysql://root:{pw}@{host}:3306/shop",
            f"mongodb+srv://svc_user:{pw}@cluster0.{_rand(rng, LOWER_DIGITS, 5)}.mongodb.net/app",
            f"redis://:{pw}@{host}:6379/0",
            f"amqp://rabbit:{pw}@{host}:5672/%2f",
        ]
    )
    return f"DATABASE_URL={url}", [pw]


def s_password(rng: random.Random, zh: bool) -> Snippet:
    pw = fake_password(rng)
    if zh:
        label = rng.choice(["密码", "数据库密码", "WiFi 密碼", "登录口令", "服务器密码"])
        colon = rng.choice(["：", ": ", "："])
        return f"{label}{colon}{pw}", [pw]
    label = rng.choice(["password", "db_password", "PGPASSWORD", "admin password", "passwd"])
    sep = "=" if label.isupper() else ": "
    return f"{label}{sep}{pw}", [pw]


def s_azure(rng: random.Random, zh: bool) -> Snippet:
    key = fake_azure_key(rng)
    account = "st" + _rand(rng, LOWER_DIGITS, 10)
    conn = (
        f"DefaultEndpointsProtocol=https;AccountName={account};AccountKey={key};"
        "EndpointSuffix=core.windows.net"
    )
    return conn, [key]


def s_openai(rng: random.Random, zh: bool) -> Snippet:
    key = fake_openai(rng)
    return f'OPENAI_API_KEY="{key}"', [key]


def s_anthropic(rng: random.Random, zh: bool) -> Snippet:
    key = fake_anthropic(rng)
    return f"ANTHROPIC_API_KEY={key}", [key]


def s_basic_auth(rng: random.Random, zh: bool) -> Snippet:
    pw = _rand(rng, ALNUM, 16)
    return f"git remote add backup https://deploy:{pw}@git.corp.internal/team/notes.git", [pw]


def s_google(rng: random.Random, zh: bool) -> Snippet:
    key = fake_google(rng)
    return f"maps api key: {key}", [key]


def s_gitlab(rng: random.Random, zh: bool) -> Snippet:
    token = fake_gitlab(rng)
    return f"CI token {token}", [token]


SNIPPETS: tuple[Callable[[random.Random, bool], Snippet], ...] = (
    s_aws,
    s_github,
    s_slack,
    s_stripe,
    s_jwt,
    s_pem,
    s_gcp,
    s_conn,
    s_password,
    s_azure,
    s_openai,
    s_anthropic,
    s_basic_auth,
    s_google,
    s_gitlab,
)

PROSE_EN = [
    "Notes from the deploy on Tuesday. Ops asked me to keep this handy until the rotation.",
    "Quick reference for the staging environment; move this into the password manager later.",
    "Meeting recap: we migrated the service and the new credentials are below.",
]
PROSE_ZH = [
    "周二上线的记录，运维让我先记在这里，等轮换之后再删。",
    "测试环境速查表，之后要挪到密码管理器里。",
    "会议纪要：服务已经迁移，新的凭据如下。",
]


def _place(rng: random.Random, snippet: str, zh: bool, placement: str, title: str) -> str:
    intro = rng.choice(PROSE_ZH if zh else PROSE_EN)
    head = f"# {title}\n\n{intro}\n\n"
    single = "\n" not in snippet
    if placement == "prose" and single:
        lead = "配置如下 " if zh else "Use "
        tail = " ，别外传。" if zh else " until Friday."
        return (
            head + f"{lead}{snippet}{tail}\n\n" + ("- 待办：轮换\n" if zh else "- TODO: rotate\n")
        )
    pair = _KEY_VALUE.match(snippet) if single else None
    if placement == "table" and single:
        key, value = (pair.group(1), pair.group(3)) if pair else ("值" if zh else "value", snippet)
        header = "| 名称 | 值 |" if zh else "| Name | Value |"
        return head + f"{header}\n|---|---|\n| {key.strip()} | {value.strip()} |\n| owner | ops |\n"
    if placement == "front-matter" and pair:
        key = pair.group(1).strip().replace(" ", "_")
        fm = f"---\ntitle: {title}\ntags: [ops]\n{key}: {pair.group(3).strip()}\n---\n"
        return fm + head
    lang = rng.choice(["", "bash", "yaml", "ini"])
    return (
        head + f"```{lang}\n{snippet}\n```\n\n" + ("用完即删。\n" if zh else "Delete after use.\n")
    )


_KEY_VALUE = re.compile(r"^([\w .\-]+?)\s*(=|:(?!//)|：)\s*(\S.*)$")
PLACEMENTS = ("prose", "code", "table", "front-matter")


def secret_notes() -> list[tuple[str, str, list[str]]]:
    """(path, text, secret values) for notes that must be quarantined; English and Chinese."""
    rng = random.Random(SEED)
    notes: list[tuple[str, str, list[str]]] = []
    i = 0
    for round_ in range(2):
        for make in SNIPPETS:
            for placement in PLACEMENTS[round_ * 2 : round_ * 2 + 2]:
                zh = i % 2 == 1
                snippet, secrets = make(rng, zh)
                title = ("部署笔记 " if zh else "Deploy notes ") + str(i)
                text = _place(rng, snippet, zh, placement, title)
                notes.append((f"ops/{'zh' if zh else 'en'}-{i:03d}.md", text, secrets))
                i += 1
    # Chinese password lines in a table with a header column, and a seed phrase.
    for _ in range(4):
        pw = fake_password(rng)
        text = (
            "# 账号清单\n\n| 系统 | 用户名 | 密码 |\n|---|---|---|\n"
            f"| 路由器 | admin | {pw} |\n| NAS | root | 见密码管理器 |\n"
        )
        notes.append((f"home/accounts-{i}.md", text, [pw]))
        i += 1
    words = "abandon ability absorb acoustic adapt badge bamboo cactus canal depart dizzy eager"
    shuffled = words.split()
    rng.shuffle(shuffled)
    seed = " ".join(shuffled)
    notes.append(("crypto/wallet.md", f"# Wallet\n\nseed phrase: {seed}\n", [seed]))
    notes.append(("crypto/钱包.md", f"# 钱包\n\n助记词：\n{seed}\n", [seed]))
    return notes


# --- benign look-alikes ----------------------------------------------------------------------


def _benign_templates(rng: random.Random) -> list[tuple[str, str]]:
    sha = fake_hex(rng, 40)
    short = sha[:7]
    u = str(uuid.UUID(int=rng.getrandbits(128)))
    digest = hashlib.sha256(rng.randbytes(16)).hexdigest()
    md5 = hashlib.md5(rng.randbytes(16)).hexdigest()
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(300)).decode()
    fpr = " ".join(fake_hex(rng, 4).upper() for _ in range(10))
    sri = base64.b64encode(rng.randbytes(48)).decode()
    return [
        ("dev/git-log.md", f"# Log\n\ncommit {sha}\nAuthor: Ann <ann@x.org>\n\n    fix typo\n"),
        ("dev/review.md", f"Reviewed {short} and {sha[:12]}; merged as {sha}.\n"),
        ("dev/uuids.md", f"| id | name |\n|---|---|\n| {u} | alpha |\n| {uuid.uuid4()} | beta |\n"),
        (
            "dev/checksums.md",
            f"Download and verify:\n\n```\nsha256sum: {digest}\nmd5: {md5}\n```\n",
        ),
        ("dev/checksum-table.md", f"| file | sha256 |\n|---|---|\n| app.tar.gz | {digest} |\n"),
        ("dev/image.md", f"Logo: ![logo](data:image/png;base64,{png})\n"),
        (
            "dev/env-code.md",
            '```python\nimport os\npassword = os.environ["DB_PASSWORD"]\n'
            'api_key = os.getenv("OPENAI_API_KEY")\ntoken = get_token()\n```\n',
        ),
        ("dev/placeholder.md", "Config:\n\n```yaml\nuser: admin\npassword: <your password>\n```\n"),
        ("dev/placeholder2.md", "password: ${DB_PASSWORD}\nsecret: {{ vault_secret }}\n"),
        (
            "dev/placeholder3.md",
            "password: changeme\napi_key: your-api-key-here\ntoken: xxxxxxxx\n",
        ),
        ("dev/placeholder4.md", 'PGPASSWORD="********" psql -h localhost\n'),
        (
            "dev/docker.md",
            f"image: postgres@sha256:{digest}\nFROM python:3.11-slim@sha256:{digest}\n",
        ),
        ("dev/pgp.md", f"Key fingerprint = {fpr}\nuid Ann <ann@x.org>\n"),
        (
            "misc/lorem.md",
            "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
            "incididunt ut labore et dolore magna aliqua.\n",
        ),
        (
            "zh/忘记了.md",
            "# 忘记密码怎么办\n\n忘记密码怎么办？点击登录页的“忘记密码”，按提示重置。\n",
        ),
        ("zh/策略.md", "密码至少 8 位，需包含数字和字母。请勿把密码写在笔记里。\n"),
        ("zh/申请.md", "数据库密码：请向管理员申请，不要写在这里。\n口令：见密码管理器\n"),
        ("zh/学习.md", "今天学习了密码学的基础：对称加密、非对称加密和哈希函数。\n"),
        ("zh/修改.md", "修改密码的步骤：\n1. 打开设置\n2. 点击“安全”\n3. 输入旧密码和新密码\n"),
        ("zh/空.md", "密码为空时系统会提示错误。密码是什么并不重要，重要的是定期更换。\n"),
        ("zh/掩码.md", "密码：******\n密碼: <填写你的密码>\n"),
        ("dev/limits.md", "password_min_length: 12\nmax_tokens: 4096\ntoken_limit: 8000\n"),
        ("dev/bearer.md", 'curl -H "Authorization: Bearer $TOKEN" https://api.x.org\n'),
        ("dev/bearer2.md", "Send `Authorization: Bearer <token>` with every request.\n"),
        ("dev/local-db.md", "postgresql://user:password@localhost:5432/mydb\n"),
        ("dev/local-db2.md", "DATABASE_URL=postgres://postgres:postgres@localhost:5432/app\n"),
        ("dev/redis.md", "REDIS_URL=redis://localhost:6379/0\nssh git@github.com:ann/notes.git\n"),
        ("dev/links.md", "See https://github.com/ann/notes and mailto:ann@x.org.\n"),
        ("dev/npm.md", f'"integrity": "sha512-{sri}",\n'),
        ("dev/ssh-pub.md", f"public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{sri[:43]} ann\n"),
        ("dev/cert.md", f"-----BEGIN CERTIFICATE-----\n{sri}\n-----END CERTIFICATE-----\n"),
        ("dev/pubkey.md", f"-----BEGIN PUBLIC KEY-----\n{sri}\n-----END PUBLIC KEY-----\n"),
        ("dev/session.md", f"session_id: {u}\netag: {md5}\nrequest_id: {uuid.uuid4()}\n"),
        ("dev/cache.md", 'cache_key: v1-deps-{{ checksum "poetry.lock" }}\n'),
        ("misc/advice.md", "The secret is to keep it simple. Token: a unit of text in NLP.\n"),
        (
            "misc/mnemonic.md",
            "A mnemonic for the planets: My Very Educated Mother Just Served Us "
            "Nine Pizzas, and you can use it for any of the other lists too.\n",
        ),
        ("dev/magic-link.md", "Passwordless login: the user clicks a magic link.\n"),
        ("dev/reset.md", "Password: reset it via the portal, then log in again.\n"),
        ("dev/shell.md", "pwd: prints the working directory\nPWD=/home/ann/notes\nbypass: true\n"),
        ("dev/aws-docs.md", "AWS docs use AKIAIOSFODNN7EXAMPLE as the sample access key id.\n"),
        ("dev/stripe-docs.md", "Stripe test mode keys start with sk_test_ and are safe in docs.\n"),
        (
            "dev/py-input.md",
            "```python\npassword = getpass.getpass()\npassword = args.password\n```\n",
        ),
        (
            "dev/compare.md",
            "```python\nif password == confirm:\n    save(user, password=password)\n```\n",
        ),
        ("dev/colors.md", "Palette: #1e90ff #ff6347 #2e8b57; hash: " + digest + "\n"),
        (
            "dev/k8s.md",
            f"secretName: tls-cert\nsecretKeyRef:\n  name: db\n  key: password\nuid: {u}\n",
        ),
        ("dev/hash-assign.md", f'commit_sha = "{sha}"\nfile_hash: {digest}\napi_key_id: {u}\n'),
        ("dev/entropy-id.md", f"token: {u}\nrelease_key: {digest}\n"),
        ("zh/提交.md", f"提交 {short} 修复了登录页的密码校验；完整哈希 {sha}。\n"),
        ("zh/校验.md", f"下载后校验 SHA256：`{digest}`\n"),
        ("zh/镜像.md", f"镜像摘要：sha256:{digest}\n"),
        ("zh/会议.md", "# 周会\n\n讨论了口令复杂度要求和双因素认证的推广计划。\n"),
        ("dev/yaml-schema.md", "password:\n  type: string\n  required: true\n  minLength: 8\n"),
        ("dev/sql.md", "```sql\nALTER USER app WITH PASSWORD :'new_password';\n```\n"),
        ("dev/typing.md", "```python\ndef login(user: str, password: str) -> bool: ...\n```\n"),
        ("dev/base64-data.md", f"thumbnail: data:image/jpeg;base64,{png[:200]}\n"),
        ("dev/gitlog2.md", f"{short} (HEAD -> main) Merge pull request #42\n{sha[:9]} docs\n"),
    ]


def benign_notes() -> list[tuple[str, str]]:
    """(path, text) for notes that look a bit like secrets but must be indexed."""
    return _benign_templates(random.Random(SEED + 1))
