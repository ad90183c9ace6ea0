"""Secrets outside a `label: value` line (in running prose, on the line after their label, seed
phrases, in a file name) and privacy markers in the forms people write them, with their benign
look-alikes: issue 28's corpus, the kinds of sensitive note the earlier rules let through and the
benign notes they quarantined, written BEFORE the rules for them, from public formats and real
usage.

Kinds: secrets in running prose (an account and its token in one sentence), a password on the
line after its label, wallet seed phrases (BIP-39 words from the `mnemonic` package's public
wordlists, some with a valid checksum, some not), a password in a file name, and privacy markers
in the forms people write them (`<private>` with odd blanks or case, TOML `+++` and JSON front
matter, indented or preceded front matter, a key given twice). Benign look-alikes: camelCase
names under secret-ish keys, test-runner output naming password tests, design notes whose file
name says "credentials", word lists, ids in prose, notes about markers and seeds.

Two parts, written together and kept apart: "dev28" templates are what the rules were tuned on;
"held28" templates (other phrasings, languages, layouts and dialects of the same kinds) were not
looked at while tuning and are reported on their own. Values come from a seeded RNG: no real
key, password or wallet is in the repository.

A sample whose secret sits inside a `<private>` span expects "hidden": the note may be indexed,
but the span's text must reach no table or output. Every other secret sample expects the note to
be quarantined.
"""

from __future__ import annotations

import random
import string

from mnemonic import Mnemonic

from support.sensitive_corpus_formats import Sample

SEED = 28_2026
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64URL = ALNUM + "-_"
BIP39 = {lang: Mnemonic(lang) for lang in ("english", "chinese_simplified", "spanish", "french")}


def _r(rng: random.Random, chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _pw(rng: random.Random) -> str:
    """A password as a person or a manager makes it: letters, digits and a symbol."""
    style = rng.random()
    if style < 0.5:
        return rng.choice("ABCDEFGHKMNPRSTZ") + _r(rng, ALNUM + "!#%&*@", 10) + rng.choice("2345")
    word = rng.choice(["Harbor", "Maple", "Cobalt", "Lantern", "Falcon", "Quartz", "Tundra"])
    return f"{word}{rng.randint(10, 9999)}{rng.choice('!#$%&*')}{rng.choice('xyzq')}"


def _fname_pw(rng: random.Random) -> str:
    """A password that can be a file name: no slash, no symbol git or a shell dislikes."""
    return rng.choice("ABCDEFGHKMNPRSTZ") + _r(rng, ALNUM, 8) + rng.choice("23456789")


def _seed(rng: random.Random, lang: str = "english", words: int = 12, valid: bool = True) -> str:
    m = BIP39[lang]
    if valid:
        phrase = m.to_mnemonic(rng.randbytes(words * 4 // 3))
        return " ".join(phrase.split())  # Japanese-style ideographic spaces are not used here
    return " ".join(rng.choice(m.wordlist) for _ in range(words))


Template = tuple[str, str, str, str, str, tuple[str, ...], str]
# (template id, kind, category, lang, text, secrets, path or "") ; secrets empty = benign


def _secrets(rng: random.Random, part: str) -> list[Template]:  # noqa: PLR0915 - flat data
    out: list[Template] = []

    def add(
        tid: str, kind: str, category: str, lang: str, text: str, secret: str, path: str = ""
    ) -> None:
        out.append((tid, kind, category, lang, text, (secret,), path))

    def note(body: str, title: str = "Notes") -> str:
        return f"# {title}\n\n{body}\n\nRotate after the review.\n"

    if part == "dev28":
        # --- secrets in running prose ------------------------------------------------------
        for i in range(2):
            tok = _r(rng, HEX, 32)
            add(
                f"prose/twilio-{i}",
                "prose-account-token",
                "prose-secret",
                "en",
                note(
                    f"The Twilio account AC{_r(rng, HEX, 32)} uses auth token {tok} for the SMS alerts."
                ),
                tok,
            )
            tok = _r(rng, ALNUM, 40)
            add(
                f"prose/api-{i}",
                "prose-account-token",
                "prose-secret",
                "en",
                note(
                    f"For the analytics API, account {rng.randint(10000, 99999)} authenticates with token {tok} until Friday."
                ),
                tok,
            )
            tok = _r(rng, HEX, 32)
            add(
                f"prose/mailjet-{i}",
                "prose-key-secret",
                "prose-secret",
                "en",
                note(
                    f"I set the Mailjet API key to {_r(rng, HEX, 32)} and the secret to {tok} yesterday."
                ),
                tok,
            )
            tok = _r(rng, ALNUM, 30)
            add(
                f"prose/aliyun-{i}",
                "prose-account-token",
                "prose-secret",
                "zh",
                note(
                    f"阿里云账号 {_r(rng, string.digits, 16)} 的 AccessKey Secret 是 {tok}，别外传。"
                ),
                tok,
            )
            tok = _r(rng, ALNUM + "+/", 40)
            add(
                f"prose/ja-{i}",
                "prose-account-token",
                "prose-secret",
                "ja",
                note(f"アカウントID {_r(rng, string.digits, 12)} のシークレットは {tok} です。"),
                tok,
            )
            tok = _r(rng, ALNUM, 32)
            add(
                f"prose/de-{i}",
                "prose-account-token",
                "prose-secret",
                "de",
                note(f"Das API-Token für Konto {rng.randint(1000, 9999)} lautet {tok}."),
                tok,
            )
            tok = _r(rng, ALNUM + "+/", 40)
            add(
                f"prose/aws-pair-{i}",
                "prose-key-secret",
                "prose-secret",
                "en",
                note(
                    f"Created access key AKIA{_r(rng, string.ascii_uppercase + string.digits, 16)} with secret {tok} for the backup job."
                ),
                tok,
            )
            tok = _r(rng, B64URL, 40)
            add(
                f"prose/client-{i}",
                "prose-client-secret",
                "prose-secret",
                "en",
                note(f"Use client id {_r(rng, HEX, 24)} and client secret {tok} to get a token."),
                tok,
            )
        # --- password on the line after its label ------------------------------------------
        for i in range(2):
            for tid, lang, body in (
                ("alone", "en", "Password\n{pw}"),
                ("bold-code", "en", "**Password:**\n\n`{pw}`"),
                ("sentence", "en", "The root password for the NAS is:\n    {pw}"),
                ("de", "de", "Passwort:\n{pw}"),
                ("zh", "zh", "密码\n{pw}"),
                ("below", "en", "WiFi password below\n{pw}"),
                ("heading", "en", "## Password\n\n{pw}"),
                ("list", "en", "- Password:\n  - {pw}"),
            ):
                pw = _pw(rng)
                add(
                    f"next-line/{tid}-{i}",
                    "password-next-line",
                    "next-line",
                    lang,
                    note("Router login, user admin.\n\n" + body.format(pw=pw)),
                    pw,
                )
        # --- seed phrases ------------------------------------------------------------------
        for i in range(2):
            s = _seed(rng, valid=True)
            add(f"seed/bare-valid-{i}", "seed-bare", "seed-phrase", "en", note(s, "Wallet"), s)
            s = _seed(rng, valid=False)
            add(
                f"seed/bare-random-{i}",
                "seed-bare",
                "seed-phrase",
                "en",
                note(f"Paper backup, kept in the safe:\n\n{s}", "Wallet"),
                s,
            )
            s = _seed(rng, words=24)
            add(
                f"seed/one-per-line-{i}",
                "seed-lines",
                "seed-phrase",
                "en",
                note("\n".join(s.split()), "Ledger"),
                s.split()[0] + " " + s.split()[1],
            )
            words = _seed(rng, valid=False).split()
            grid = "\n".join(
                "  ".join(f"{r * 3 + c + 1}. {words[r * 3 + c]}" for c in range(3))
                for r in range(4)
            )
            add(
                f"seed/grid-{i}",
                "seed-grid",
                "seed-phrase",
                "en",
                note(grid, "Recovery sheet"),
                f"1. {words[0]}",
            )
            s = _seed(rng)
            add(
                f"seed/commas-{i}",
                "seed-labelled",
                "seed-phrase",
                "en",
                note("Ledger backup: " + ", ".join(s.split()), "Ledger"),
                s.split(" ")[0] + ", " + s.split(" ")[1],
            )
            s = " ".join(w.capitalize() for w in _seed(rng, valid=False).split())
            add(f"seed/capitals-{i}", "seed-bare", "seed-phrase", "en", note(s, "Wallet"), s)
            s = _seed(rng)
            add(
                f"seed/prose-{i}",
                "seed-prose",
                "seed-phrase",
                "en",
                note(f"Wrote down the words {s} on the card in the drawer."),
                s,
            )
            s = _seed(rng)
            add(
                f"seed/zh-label-{i}",
                "seed-labelled",
                "seed-phrase",
                "zh",
                note(f"钱包助记词：{s}", "钱包"),
                s,
            )
        # --- password in a file name -------------------------------------------------------
        for i in range(2):
            for tid, lang, name in (
                ("router", "en", "home/router-password-{pw}.md"),
                ("bank-pw", "en", "money/bank_pw_{pw}.md"),
                ("zh", "zh", "生活/密码 {pw}.md"),
                ("assign", "en", "ops/admin password={pw}.md"),
                ("de", "de", "Haus/Passwort-{pw}.md"),
            ):
                pw = _fname_pw(rng)
                add(
                    f"filename/{tid}-{i}",
                    "password-in-filename",
                    "filename",
                    lang,
                    note("See the title."),
                    pw,
                    name.format(pw=pw),
                )
        # --- privacy markers ---------------------------------------------------------------
        for i in range(2):
            body = f"Met Dr. {rng.choice(['Okafor', 'Lindqvist', 'Moreau'])} about the biopsy {rng.randint(100, 999)}."
            for tid, text in (
                ("span-blanks", f"# Health\n\nPublic part.\n\n< private >\n{body}\n</private>\n"),
                (
                    "span-caps",
                    f"# Health\n\nPublic part. <PRIVATE>{body}</ PRIVATE> More public.\n",
                ),
            ):
                out.append(
                    (
                        f"marker/{tid}-{i}",
                        "private-span",
                        "private-marker",
                        "en",
                        text,
                        (body,),
                        "hidden",
                    )
                )
            for tid, text in (
                ("toml", f'+++\ntitle = "Health"\nprivate = true\n+++\n\n{body}\n'),
                ("json", f'{{\n  "title": "Health",\n  "private": true\n}}\n\n{body}\n'),
                ("indented", f"  ---\n  title: Health\n  private: true\n  ---\n\n{body}\n"),
                ("blank-first", f"\n---\ntitle: Health\nprivate: true\n---\n\n{body}\n"),
                (
                    "twice",
                    f"---\ntitle: Health\nprivate: true\ntags: [log]\nprivate: false\n---\n\n{body}\n",
                ),
                (
                    "tags-twice",
                    f"---\ntitle: Health\ntags: [private]\ntags: [log]\n---\n\n{body}\n",
                ),
                ("nested", f"---\ntitle: Health\nmeta:\n  private: true\n---\n\n{body}\n"),
                ("privacy-key", f"---\ntitle: Health\nprivacy: private\n---\n\n{body}\n"),
                (
                    "classification",
                    f"---\ntitle: Health\nclassification: Confidential\n---\n\n{body}\n",
                ),
            ):
                add(f"marker/{tid}-{i}", "front-matter-" + tid, "private-marker", "en", text, body)
    else:
        # --- secrets in running prose ------------------------------------------------------
        for i in range(2):
            tok = _r(rng, ALNUM, 48)
            add(
                f"prose/mapbox-{i}",
                "prose-account-token",
                "prose-secret",
                "en",
                note(
                    f"Our mapping account (acme-maps) has the secret token {tok}, rotate it in March."
                ),
                tok,
            )
            tok = _r(rng, ALNUM, 36)
            add(
                f"prose/fr-{i}",
                "prose-account-token",
                "prose-secret",
                "fr",
                note(f"Le compte {rng.randint(10000, 99999)} utilise le jeton {tok} pour l'API."),
                tok,
            )
            tok = _r(rng, ALNUM, 40)
            add(
                f"prose/es-{i}",
                "prose-account-token",
                "prose-secret",
                "es",
                note(
                    f"La cuenta {rng.randint(1000, 9999)} usa la clave secreta {tok} en producción."
                ),
                tok,
            )
            tok = _r(rng, ALNUM, 40)
            add(
                f"prose/ko-{i}",
                "prose-account-token",
                "prose-secret",
                "ko",
                note(f"계정 ID {rng.randint(1000, 9999)} 의 API 토큰은 {tok} 입니다."),
                tok,
            )
            tok = _r(rng, HEX, 32)
            add(
                f"prose/sid-{i}",
                "prose-account-token",
                "prose-secret",
                "en",
                note(
                    f"Account SID AC{_r(rng, HEX, 32)}, auth token {tok}. Numbers are in the sheet."
                ),
                tok,
            )
            tok = _r(rng, B64URL, 43)
            add(
                f"prose/billing-{i}",
                "prose-account-token",
                "prose-secret",
                "en",
                note(
                    f"When calling the billing API for account {rng.randint(1000, 9999)}, pass secret {tok} in the header."
                ),
                tok,
            )
            tok = _r(rng, ALNUM, 32)
            add(
                f"prose/zh-token-{i}",
                "prose-account-token",
                "prose-secret",
                "zh",
                note(
                    f"企业微信应用 {rng.randint(1000000, 9999999)} 的密钥为 {tok}，仅限内网使用。"
                ),
                tok,
            )
        # --- password on the line after its label ------------------------------------------
        for i in range(2):
            for tid, lang, body in (
                ("parenthesis", "en", "Admin password (rotate monthly):\n{pw}"),
                ("ja", "ja", "パスワード：\n\n{pw}"),
                ("fr", "fr", "mot de passe\n{pw}"),
                ("de-code", "de", "Kennwort für den Server\n`{pw}`"),
                ("ko", "ko", "비밀번호\n{pw}"),
                ("fenced", "en", "Pass:\n```\n{pw}\n```"),
                ("es", "es", "contraseña del router:\n{pw}"),
            ):
                pw = _pw(rng)
                add(
                    f"next-line/{tid}-{i}",
                    "password-next-line",
                    "next-line",
                    lang,
                    note("Office network.\n\n" + body.format(pw=pw)),
                    pw,
                )
        # --- seed phrases ------------------------------------------------------------------
        for i in range(2):
            s = _seed(rng, words=18)
            add(
                f"seed/code-{i}",
                "seed-bare",
                "seed-phrase",
                "en",
                note(f"```\n{s}\n```", "Cold wallet"),
                s,
            )
            w24 = _seed(rng, words=24, valid=False).split()
            add(
                f"seed/two-lines-{i}",
                "seed-lines",
                "seed-phrase",
                "en",
                note(" ".join(w24[:12]) + "\n" + " ".join(w24[12:]), "Backup"),
                " ".join(w24[:12]),
            )
            s = _seed(rng)
            add(
                f"seed/hyphens-{i}",
                "seed-labelled",
                "seed-phrase",
                "en",
                note("Wallet words (Trezor): " + "-".join(s.split())),
                "-".join(s.split()),
            )
            s = _seed(rng, lang="chinese_simplified")
            add(
                f"seed/zh-words-{i}",
                "seed-labelled",
                "seed-phrase",
                "zh",
                note(f"助记词：{s}", "钱包"),
                s,
            )
            s = _seed(rng, lang="spanish")
            add(
                f"seed/es-{i}",
                "seed-labelled",
                "seed-phrase",
                "es",
                note(f"Frase de recuperación: {s}", "Cartera"),
                s,
            )
            words = _seed(rng, valid=False).split()
            add(
                f"seed/numbered-{i}",
                "seed-grid",
                "seed-phrase",
                "en",
                note("\n".join(f"{k + 1:02d} {w}" for k, w in enumerate(words)), "Seed"),
                f"01 {words[0]}",
            )
            words = _seed(rng).split()
            rows = "\n".join(
                f"| {k + 1} | {words[k]} | {k + 7} | {words[k + 6]} |" for k in range(6)
            )
            add(
                f"seed/table-{i}",
                "seed-grid",
                "seed-phrase",
                "en",
                note("| # | word | # | word |\n|---|---|---|---|\n" + rows, "Seed"),
                f"| 1 | {words[0]} |",
            )
        # --- password in a file name -------------------------------------------------------
        for i in range(2):
            for tid, lang, name in (
                ("nas", "en", "infra/NAS pass {pw}.md"),
                ("wlan", "de", "Netz/wlan kennwort {pw}.md"),
                ("ja", "ja", "メモ/パスワード {pw}.md"),
                ("fr", "fr", "maison/mot-de-passe_{pw}.md"),
                ("pwd", "en", "ops/login pwd={pw}.md"),
                ("ko", "ko", "메모/비밀번호 {pw}.md"),
            ):
                pw = _fname_pw(rng)
                add(
                    f"filename/{tid}-{i}",
                    "password-in-filename",
                    "filename",
                    lang,
                    note("See the title."),
                    pw,
                    name.format(pw=pw),
                )
        # --- privacy markers ---------------------------------------------------------------
        for i in range(2):
            body = f"Therapy session {rng.randint(10, 99)}: talked about {rng.choice(['the move', 'work', 'sleep'])}."
            for tid, text in (
                ("span-trailing", f"# Journal\n\nOpen part.\n\n<Private >\n{body}\n</private >\n"),
                ("span-newline", f"# Journal\n\nOpen part.\n<private\n>{body}</private>\n"),
                ("span-slash", f"# Journal\n\nOpen part. < private>{body}< /private >\n"),
            ):
                out.append(
                    (
                        f"marker/{tid}-{i}",
                        "private-span",
                        "private-marker",
                        "en",
                        text,
                        (body,),
                        "hidden",
                    )
                )
            for tid, text in (
                (
                    "toml-tags",
                    f'+++\ntitle = "Journal"\ntags = ["private", "log"]\n+++\n\n{body}\n',
                ),
                ("json-tags", f'{{\n  "title": "Journal",\n  "tags": ["private"]\n}}\n\n{body}\n'),
                (
                    "visibility-twice",
                    f"---\ntitle: Journal\nvisibility: public\nvisibility: private\n---\n\n{body}\n",
                ),
                (
                    "private-twice",
                    f"---\nprivate: yes\ntitle: Journal\nprivate: no\n---\n\n{body}\n",
                ),
                ("bom-blank", f"\ufeff\n\n---\ntitle: Journal\nprivate: true\n---\n\n{body}\n"),
                ("sensitivity", f"---\ntitle: Journal\nsensitivity: confidential\n---\n\n{body}\n"),
                ("quoted-yes", f'---\ntitle: Journal\nprivate: "yes"\n---\n\n{body}\n'),
                ("tab-indented", f"---\n\ttitle: Journal\n\tprivate: true\n---\n\n{body}\n"),
                ("cjk-key", f"---\ntitle: 日记\n私密: 是\n---\n\n{body}\n"),
            ):
                add(f"marker/{tid}-{i}", "front-matter-" + tid, "private-marker", "en", text, body)
    return out


def _benign(rng: random.Random, part: str) -> list[Template]:  # noqa: PLR0915 - flat data
    out: list[Template] = []

    def add(tid: str, kind: str, lang: str, text: str, path: str = "") -> None:
        out.append((tid, kind, "benign", lang, text, (), path))

    def note(body: str, title: str = "Notes") -> str:
        return f"# {title}\n\n{body}\n"

    if part == "dev28":
        for i, line in enumerate(
            (
                "apiKey: getApiKeyFromVaultProvider",
                "token = refreshAccessTokenIfExpired2",
                "secretName: dbPasswordSecretRef",
                "authTokenProvider: OAuth2BearerTokenProviderImpl",
                "client_secret: useClientSecretFromEnvironment",
                "SECRET_KEY_FACTORY = PBKDF2WithHmacSHA256KeyFactory",
                "accessToken: parseJWTAccessTokenFromHeader",
                "password_validator: MinimumLengthPasswordValidator",
            )
        ):
            add(f"camel/{i}", "camel-identifier", "en", note(f"```yaml\n{line}\n```", "Config"))
        for i, line in enumerate(
            (
                "PASSED tests/test_auth.py::test_password_reset\nPASSED tests/test_auth.py::test_password_hash_roundtrip",
                "tests/test_auth.py::test_password_min_length PASSED [ 12%]\ntests/test_auth.py::test_token_expiry FAILED [ 25%]",
                "FAILED tests/test_login.py::TestPassword::test_password_change - AssertionError: assert 401 == 200",
                "--- PASS: TestPasswordReset (0.00s)\n--- PASS: TestPasswordHash (0.01s)\nok  \tgithub.com/acme/auth/password\t0.012s",
                "  ✓ password: rejects short values (5 ms)\n  ✓ password: accepts passphrases (2 ms)",
                "test_password_change (auth.tests.PasswordTests.test_password_change) ... ok\ntest_secret_rotation (auth.tests.SecretTests) ... ok",
            )
        ):
            add(f"test-output/{i}", "test-runner-output", "en", note(f"```\n{line}\n```", "CI run"))
        for i, (path, body) in enumerate(
            (
                (
                    "design/credentials-rotation.md",
                    "Design: rotate service credentials every 90 days.\n\nStatus: Draft-v2\nOwner: platform\nTicket: SEC-2041\nAlgorithm: AES-256-GCM",
                ),
                (
                    "arch/credentials_store_design.md",
                    "The credentials store keeps secrets in Vault; apps read them at start.\n\n| field | type |\n|---|---|\n| name | text |\n| version | int |",
                ),
                (
                    "Credentials API.md",
                    "The Credentials API issues short-lived tokens (TTL 15 min) via OIDC.\nEndpoint: /v1/credentials\nRFC: RFC6749",
                ),
            )
        ):
            add(
                f"credentials-name/{i}",
                "credentials-design-note",
                "en",
                note(body, "Credentials design"),
                path,
            )
        for i, body in enumerate(
            (
                "BIP-39 uses a list of 2048 words; a 12-word phrase carries 128 bits plus a 4-bit checksum.",
                "Packing list: tent stove lantern rope knife compass blanket kettle\nthen water and snacks",
                "Never type your recovery phrase into a website. Write the 12 words on paper.",
            )
        ):
            add(f"seed-talk/{i}", "seed-discussion", "en", note(body, "Wallets"))
        for i, body in enumerate(
            (
                "Account 123456789012 in eu-west-1 runs instance i-0a1b2c3d4e5f67890 for the API.",
                f"Order {_r(rng, HEX, 24)} for customer 8812 shipped; tracking 1Z999AA10123456784.",
                f"The token limit for account 4471 is 8192 per request; see ticket {rng.randint(1000, 9999)}.",
            )
        ):
            add(f"ids-in-prose/{i}", "ids-in-prose", "en", note(body))
        for i, body in enumerate(
            (
                "Password requirements:\n- at least 12 characters\n- no reuse",
                "Password\n\nUse the manager; never write it here.",
                "Password reset:\nhttps://id.corp.example/reset",
                "## Password\n\nAsk Jan for it.",
            )
        ):
            add(f"next-line-benign/{i}", "label-then-text", "en", note(body, "Accounts"))
        for i, path in enumerate(
            (
                "topics/password-reset-flow-2024.md",
                "topics/passwords-v2-migration.md",
                "topics/wifi-password-policy.md",
                "主题/密码修改流程2024.md",
            )
        ):
            add(
                f"filename-benign/{i}",
                "password-word-in-name",
                "en",
                note("How the flow works, step by step."),
                path,
            )
        for i, text in enumerate(
            (
                '+++\ntitle = "Deploy"\ndraft = false\ntags = ["ops"]\n+++\n\nDeploy on Tuesdays.\n',
                '{\n  "title": "Deploy",\n  "tags": ["ops"]\n}\n\nDeploy on Tuesdays.\n',
                "---\ntitle: Deploy\ntags: [ops]\ntags: [release]\n---\n\nDeploy on Tuesdays.\n",
                "# Markers\n\nWrap text in `<private>` and `</private>` to keep it out of the index.\n",
            )
        ):
            add(f"front-matter-benign/{i}", "front-matter-benign", "en", text)
    else:
        for i, line in enumerate(
            (
                "signingKey: loadSigningKeyFromKeystore",
                "sessionToken = generateSessionTokenForUser",
                "apiSecret: readApiSecretFromParameterStore",
                "refresh_token: exchangeRefreshTokenForAccessToken",
                "KEY_ALIAS = defaultEncryptionKeyAlias",
            )
        ):
            add(f"camel/{i}", "camel-identifier", "en", note(f"```\n{line}\n```", "Config"))
        for i, line in enumerate(
            (
                "=========================== short test summary info ===========================\nPASSED tests/test_users.py::test_password_is_hashed\nFAILED tests/test_users.py::test_password_reset_email",
                "test auth::password::tests::rejects_empty ... ok\ntest auth::token::tests::expires ... ok",
                "Password reset\n  sends an email (FAILED - 1)\n  rejects unknown users",
                "=== RUN   TestPasswordPolicy\n--- FAIL: TestPasswordPolicy (0.00s)",
            )
        ):
            add(f"test-output/{i}", "test-runner-output", "en", note(f"```\n{line}\n```", "CI log"))
        for i, (path, body) in enumerate(
            (
                (
                    "docs/credentials.md",
                    "How credentials flow: the broker mints them, the app never stores them.\nVersion: v3\nReviewer: Dana",
                ),
                (
                    "design/aws-credentials-chain.md",
                    "The SDK reads env vars, then the shared file, then the instance role.\nOrder: 1-2-3",
                ),
            )
        ):
            add(
                f"credentials-name/{i}",
                "credentials-design-note",
                "en",
                note(body, "Credentials"),
                path,
            )
        for i, body in enumerate(
            (
                "Seed phrases in BIP-39 are 12 to 24 words from a 2048-word list.",
                "Spices to buy: cinnamon pepper ginger garlic onion lemon mint basil",
            )
        ):
            add(f"seed-talk/{i}", "seed-discussion", "en", note(body, "Misc"))
        for i, body in enumerate(
            (
                "Customer account 99812 opened ticket 5521; the agent closed it in 2 hours.",
                f"Build {_r(rng, HEX, 12)} of account 7781 passed; artifact id {rng.randint(10**7, 10**8)}.",
            )
        ):
            add(f"ids-in-prose/{i}", "ids-in-prose", "en", note(body))
        for i, body in enumerate(
            (
                "Passwort:\nbitte im Passwortmanager nachsehen",
                "密码\n\n请联系管理员获取。",
                "Admin password (rotate monthly):\nsee the vault entry 'nas-admin'",
            )
        ):
            add(f"next-line-benign/{i}", "label-then-text", "en", note(body, "Konten"))
        for i, path in enumerate(
            (
                "topics/password-manager-2025-review.md",
                "topics/pwd-command-unix.md",
                "topics/Passwort-vergessen-Ablauf.md",
            )
        ):
            add(
                f"filename-benign/{i}",
                "password-word-in-name",
                "en",
                note("Notes on the topic."),
                path,
            )
        for i, text in enumerate(
            (
                '+++\ntitle = "Journal template"\nprivate = false\n+++\n\nA template.\n',
                "---\ntitle: Journal\nvisibility: public\n---\n\nOpen to all.\n",
            )
        ):
            add(f"front-matter-benign/{i}", "front-matter-benign", "en", text)
    return out


def free_form_corpus(parts: tuple[str, ...] = ("dev28", "held28")) -> list[Sample]:
    """Every sample of the chosen parts; deterministic (the seed, not the clock)."""
    samples: list[Sample] = []
    for part in parts:
        rng = random.Random(f"{SEED}:{part}")
        for tid, kind, category, lang, text, secrets, path in _secrets(rng, part) + _benign(
            rng, part
        ):
            expect = "hidden" if path == "hidden" else "quarantine"
            if path in ("", "hidden"):
                path = f"r28/{part}/notes/{len(samples):03d}.md"  # a name that says nothing
            else:
                path = f"r28/{part}/{path}"
            samples.append(
                Sample(
                    f"{part}/{tid}", kind, category, lang, "r28", path, text, secrets, part, expect
                )
            )
    return samples
