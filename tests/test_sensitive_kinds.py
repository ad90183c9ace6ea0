"""Issue 28's kinds, one behaviour each: what the earlier rules let through (secrets in prose, a
password on the line after its label, seed phrases, a password in a file name, privacy markers
in real spellings) and what they quarantined (camelCase names, test output, design notes named
"credentials"). The broad corpus is tests/support/sensitive_corpus_free_form.py, run by
test_sensitive_corpus.py through the pipeline."""

from __future__ import annotations

import random
import string

import pytest
from mnemonic import Mnemonic

from vaultmem.index.markdown import strip_private_spans
from vaultmem.index.sensitive import SensitivePolicy, mask_path_tokens
from vaultmem.index.triage import Index, Quarantine, Rules, triage

POLICY = SensitivePolicy()
RNG = random.Random(2806)


def _r(chars: str, n: int) -> str:
    return "".join(RNG.choice(chars) for _ in range(n))


ALNUM = string.ascii_letters + string.digits
TOKEN = _r(ALNUM, 40)
HEX32 = _r("0123456789abcdef", 32)
PW = "Kq7!" + _r(ALNUM, 8) + "3"
FILE_PW = "Tz" + _r(ALNUM, 7) + "8"
SEED = Mnemonic("english").to_mnemonic(bytes(range(16)))
RANDOM_SEED = " ".join(RNG.choice(Mnemonic("english").wordlist) for _ in range(12))


def _outcome(path: str, text: str):
    return triage(path, "100644", text.encode(), Rules())


def _rules(path: str, text: str) -> list[str]:
    outcome = _outcome(path, text)
    return [f.rule_id for f in outcome.findings] if isinstance(outcome, Quarantine) else []


@pytest.mark.parametrize(
    "text",
    [
        f"For the analytics API, account 48213 authenticates with token {TOKEN} until Friday.",
        f"The Twilio account AC{HEX32[::-1]} uses auth token {HEX32} for the alerts.",
        f"Das API-Token für Konto 4711 lautet {TOKEN}.",
        f"阿里云账号 1234567890 的 AccessKey Secret 是 {TOKEN}，别外传。",
        f"企业微信应用 8812 的密钥为 {TOKEN}，仅限内网使用。",
    ],
)
def test_a_secret_in_running_prose_is_found(text: str) -> None:
    assert "secret-in-prose" in _rules("n.md", f"# Notes\n\n{text}\n")


@pytest.mark.parametrize(
    "body",
    [
        f"Password\n{PW}",
        f"**Password:**\n\n`{PW}`",
        f"The root password for the NAS is:\n    {PW}",
        f"Passwort:\n{PW}",
        f"密码\n{PW}",
        f"- Password:\n  - {PW}",
        f"Pass:\n```\n{PW}\n```",
    ],
)
def test_a_password_on_the_line_after_its_label_is_found(body: str) -> None:
    assert "password-assignment" in _rules("n.md", f"# Router\n\n{body}\n")


@pytest.mark.parametrize(
    "body",
    [
        SEED,
        "\n".join(SEED.split()),
        "  ".join(f"{i + 1}. {w}" for i, w in enumerate(SEED.split())),
        "Ledger backup: " + ", ".join(SEED.split()),
        f"Wrote down the words {SEED} on the card.",
        " ".join(w.capitalize() for w in RANDOM_SEED.split()),
        "助记词：" + Mnemonic("chinese_simplified").to_mnemonic(bytes(range(16, 32))),
        "Frase de recuperación: " + Mnemonic("spanish").to_mnemonic(bytes(range(32, 48))),
    ],
)
def test_a_seed_phrase_is_found_in_every_layout(body: str) -> None:
    assert "seed-phrase" in _rules("n.md", f"# Wallet\n\n{body}\n")


def test_a_list_of_common_words_is_not_a_seed_phrase() -> None:
    text = (
        "# Trip\n\nPacking list: tent stove lantern rope knife compass blanket kettle\nthen water\n"
    )
    assert isinstance(_outcome("n.md", text), Index)


@pytest.mark.parametrize(
    "path",
    [
        f"home/router-password-{FILE_PW}.md",
        f"生活/密码 {FILE_PW}.md",
        f"ops/admin password={FILE_PW}.md",
        f"Haus/Passwort-{FILE_PW}.md",
        f"ops/login pwd={FILE_PW}.md",
    ],
)
def test_a_password_in_a_file_name_quarantines_the_note_and_is_masked(path: str) -> None:
    assert "password-in-path" in _rules(path, "# x\n\nSee the title.\n")
    assert FILE_PW not in mask_path_tokens(path)


@pytest.mark.parametrize(
    "path",
    [
        "topics/password-reset-flow-2024.md",
        "topics/passwords-v2-migration.md",
        "主题/密码修改流程2024.md",
    ],
)
def test_a_name_about_passwords_is_not_a_password(path: str) -> None:
    assert isinstance(_outcome(path, "# Flow\n\nHow it works.\n"), Index)


BODY = "Met Dr. Okafor about the biopsy 731."


@pytest.mark.parametrize(
    "text",
    [
        f'+++\ntitle = "Health"\nprivate = true\n+++\n\n{BODY}\n',
        f'+++\ntitle = "Health"\ntags = ["private", "log"]\n+++\n\n{BODY}\n',
        f'{{\n  "title": "Health",\n  "private": true\n}}\n\n{BODY}\n',
        f"  ---\n  title: Health\n  private: true\n  ---\n\n{BODY}\n",
        f"\n---\ntitle: Health\nprivate: true\n---\n\n{BODY}\n",
        f"---\ntitle: Health\nprivate: true\ntags: [log]\nprivate: false\n---\n\n{BODY}\n",
        f"---\ntitle: Health\ntags: [private]\ntags: [log]\n---\n\n{BODY}\n",
        f"---\ntitle: Health\nmeta:\n  private: true\n---\n\n{BODY}\n",
        f"---\ntitle: Health\nclassification: Confidential\n---\n\n{BODY}\n",
        f"---\ntitle: 日记\n私密: 是\n---\n\n{BODY}\n",
    ],
)
def test_privacy_markers_in_every_front_matter_dialect_quarantine(text: str) -> None:
    outcome = _outcome("n.md", text)
    assert isinstance(outcome, Quarantine)
    assert {f.category for f in outcome.findings} == {"private"}


@pytest.mark.parametrize(
    "text",
    [
        '+++\ntitle = "Deploy"\ndraft = false\nprivate = false\n+++\n\nDeploy on Tuesdays.\n',
        "---\ntitle: Deploy\ntags: [ops]\ntags: [release]\n---\n\nDeploy on Tuesdays.\n",
        "---\ntitle: Deploy\nvisibility: public\n---\n\nDeploy on Tuesdays.\n",
    ],
)
def test_front_matter_that_says_nothing_private_is_indexed(text: str) -> None:
    assert isinstance(_outcome("n.md", text), Index)


@pytest.mark.parametrize(
    "marked",
    [
        f"< private >{BODY}</private>",
        f"<PRIVATE>{BODY}</ PRIVATE>",
        f"<Private >\n{BODY}\n</private >",
        f"<private\n>{BODY}</private>",
        f"< private>{BODY}< /private >",
    ],
)
def test_private_spans_in_odd_spellings_are_removed(marked: str) -> None:
    stripped = strip_private_spans(f"open {marked} open")
    assert BODY not in stripped and stripped.startswith("open ") and stripped.endswith(" open")


@pytest.mark.parametrize(
    "line",
    [
        "client_secret: useClientSecretFromEnvironment",
        "SECRET_KEY_FACTORY = PBKDF2WithHmacSHA256KeyFactory",
        "apiSecret: readApiSecretFromParameterStore",
        "accessToken: parseJWTAccessTokenFromHeader",
    ],
)
def test_camel_case_names_are_not_secrets(line: str) -> None:
    assert isinstance(_outcome("n.md", f"# Config\n\n```yaml\n{line}\n```\n"), Index)


@pytest.mark.parametrize(
    "output",
    [
        "PASSED tests/test_auth.py::test_password_reset",
        "--- PASS: TestPasswordReset (0.00s)\n--- PASS: TestPasswordHash (0.01s)",
        "FAILED tests/test_login.py::TestPassword::test_password_change - AssertionError",
        "test_password_change (auth.tests.PasswordTests.test_password_change) ... ok",
    ],
)
def test_test_runner_output_naming_password_tests_is_not_a_password(output: str) -> None:
    assert isinstance(_outcome("n.md", f"# CI\n\n```\n{output}\n```\n"), Index)


def test_a_design_note_named_credentials_is_scanned_not_quarantined_by_name() -> None:
    text = (
        "# Credentials design\n\nRotate service credentials every 90 days.\n\nStatus: Draft-v2\n"
        "Owner: platform\nTicket: SEC-2041\nAlgorithm: AES-256-GCM\n"
    )
    assert isinstance(_outcome("design/credentials-rotation.md", text), Index)
    # Its name still makes the scan strict: a login listed in it is caught.
    assert _rules("design/credentials-rotation.md", text + f"gmail: {PW}\n")
    # A credentials file that is no note is still quarantined by its name.
    assert POLICY.scan("gcp/credentials.json", "")[0].rule_id == "secret-filename"


@pytest.mark.parametrize(
    "row",
    [
        "| password manager (family) | 5.00 | 2020 | shared with Mei |",
        "| password vault app | 3,99 € | monthly |",
        "| 密码管理器 | ¥30 | 每年 |",
    ],
)
def test_a_price_beside_a_password_product_is_not_a_password(row: str) -> None:
    table = "| service | price | since | note |\n|---|---|---|---|\n" + row + "\n"
    assert _rules("finance/subscriptions.md", table) == []


def test_a_password_beside_its_row_label_is_still_found() -> None:
    assert _rules("ops/db.md", f"| host | db1 |\n| password | {PW} |\n") == ["password-assignment"]
