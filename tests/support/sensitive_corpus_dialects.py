"""Secrets and look-alikes in a dozen more languages and in config dialects: a second held-out
corpus, written AFTER the detector and never used to tune it ("late" in the reports).

Other languages (German, French, Spanish, Portuguese, Russian, Vietnamese, Thai, Turkish, Polish,
Indonesian, Arabic, Hindi), other secret formats and config dialects (XML, properties, Terraform,
Ansible, PowerShell, Cisco, CSV exports, crypto wallets), and benign notes of the same kinds.
Values come from a seeded RNG; nothing is a real key. `bench/sensitive.py` reports it as "late".
"""

from __future__ import annotations

import base64
import random
import string
import uuid

from support.sensitive_corpus_formats import Sample

SEED = 2025_1214
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _r(rng: random.Random, chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _pw(rng: random.Random) -> str:
    return rng.choice("ABCDEFGHKMNPRSTZ") + _r(rng, ALNUM + "!#%&*@", 11) + rng.choice("23456789")


def _secret_templates(rng: random.Random) -> list[tuple[str, str, str, str]]:
    """(kind, lang, text, secret)."""
    out: list[tuple[str, str, str, str]] = []

    def add(kind: str, lang: str, text: str, secret: str) -> None:
        out.append((kind, lang, text, secret))

    # Passwords in other languages.
    for lang, line in (
        ("de", "Das Passwort für den Router lautet {pw}."),
        ("de", "WLAN-Kennwort: {pw}"),
        ("fr", "mot de passe : {pw}"),
        ("fr", "Le mot de passe du NAS est {pw}"),
        ("es", "contraseña: {pw}"),
        ("es", "Contraseña del servidor = {pw}"),
        ("pt", "senha: {pw}"),
        ("ru", "пароль: {pw}"),
        ("ru", "Пароль от почты — {pw}"),
        ("vi", "mật khẩu: {pw}"),
        ("th", "รหัสผ่าน: {pw}"),
        ("tr", "şifre: {pw}"),
        ("pl", "hasło: {pw}"),
        ("id", "kata sandi: {pw}"),
        ("ar", "كلمة المرور: {pw}"),
        ("hi", "पासवर्ड: {pw}"),
        ("ja", "PW：{pw}"),
        ("ko", "PW: {pw}"),
        ("zh", "登录账号 admin，密码{pw}"),
        ("zh-Hant", "通行碼：{pw}"),
        ("ja", "ログイン情報 ID: admin / PASS: {pw}"),
        ("ko", "계정 admin / 비번 {pw}"),
        ("en", "creds are admin / {pw}"),
        ("en", "user: deploy\npass: {pw}"),
    ):
        pw = _pw(rng)
        add(f"pw-{lang}", lang, f"# Notes\n\n{line.format(pw=pw)}\n", pw)

    # Config dialects.
    for kind, tpl in (
        ("spring-properties", "spring.datasource.password={pw}"),
        ("xml-appsettings", '<add key="SmtpPassword" value="{pw}" />'),
        (
            "maven-settings",
            "<server>\n  <id>nexus</id>\n  <username>ci</username>\n  <password>{pw}</password>\n</server>",
        ),
        ("terraform", 'admin_password = "{pw}"'),
        ("ansible", "ansible_become_pass: {pw}"),
        ("powershell", '$pw = ConvertTo-SecureString "{pw}" -AsPlainText -Force'),
        ("cisco-type0", "username admin privilege 15 password 0 {pw}"),
        ("wpa-supplicant", 'network={{\n  ssid="HomeNet"\n  psk="{pw}"\n}}'),
        ("k8s-stringdata", "stringData:\n  DB_PASSWORD: {pw}"),
        ("docker-compose", "environment:\n  - POSTGRES_PASSWORD={pw}"),
        ("sqlplus", "sqlplus scott/{pw}@//db.internal:1521/ORCL"),
        ("expect", 'expect "password:"\nsend "{pw}\\r"'),
        ("browser-csv", "url,username,password\nhttps://bank.example.com,alice,{pw}"),
        (
            "keepass-csv",
            '"Title","Username","Password","URL"\n"Email","alice","{pw}","https://mail.example.com"',
        ),
        ("bitwarden-json", '{{"login": {{"username": "alice", "password": "{pw}"}}}}'),
        ("ini", "[database]\nuser = app\npassword = {pw}"),
        ("toml", '[smtp]\nusername = "mailer"\npassword = "{pw}"'),
        ("env-export", "export MYSQL_ROOT_PASSWORD='{pw}'"),
        ("json-config", '{{"db": {{"host": "db.internal", "pass": "{pw}"}}}}'),
        ("rclone", "[remote]\ntype = sftp\nhost = nas\nuser = alice\npass = {pw}"),
        ("vnc", "vncpasswd -f <<< '{pw}' > ~/.vnc/passwd"),
        ("git-credentials", "https://alice:{pw}@git.internal.example"),
    ):
        pw = _pw(rng)
        add(kind, "en", f"# Config\n\n```\n{tpl.format(pw=pw)}\n```\n", pw)

    # Other token formats.
    tokens = [
        ("gcp-access-token", "GOOGLE_ACCESS_TOKEN=ya29." + _r(rng, ALNUM + "-_", 120)),
        ("github-oauth-secret", "GITHUB_CLIENT_SECRET=" + _r(rng, HEX, 40)),
        ("spotify", "SPOTIFY_CLIENT_SECRET=" + _r(rng, HEX, 32)),
        ("azure-openai", "AZURE_OPENAI_API_KEY=" + _r(rng, HEX, 32)),
        ("mistral", "MISTRAL_API_KEY=" + _r(rng, ALNUM, 32)),
        ("cohere", "COHERE_API_KEY=" + _r(rng, ALNUM, 40)),
        ("pinecone", "PINECONE_API_KEY=pcsk_" + _r(rng, ALNUM, 6) + "_" + _r(rng, ALNUM, 64)),
        ("vercel", "VERCEL_TOKEN=" + _r(rng, ALNUM, 24)),
        ("railway", "RAILWAY_TOKEN=" + str(uuid.UUID(int=rng.getrandbits(128)))),
        ("dropbox", "dropbox token: sl." + _r(rng, ALNUM + "-_", 138)),
        (
            "asana",
            "ASANA_PAT=2/"
            + _r(rng, "0123456789", 16)
            + "/"
            + _r(rng, "0123456789", 16)
            + ":"
            + _r(rng, HEX, 32),
        ),
        ("airtable", "AIRTABLE_TOKEN=pat" + _r(rng, ALNUM, 14) + "." + _r(rng, HEX, 64)),
        ("contentful", "CONTENTFUL_MANAGEMENT_TOKEN=CFPAT-" + _r(rng, ALNUM + "-_", 43)),
        ("launchdarkly", "LD_SDK_KEY=sdk-" + str(uuid.UUID(int=rng.getrandbits(128)))),
        ("pagerduty", "PAGERDUTY_TOKEN=u+" + _r(rng, ALNUM + "-_", 18)),
        ("snyk", "SNYK_TOKEN=" + str(uuid.UUID(int=rng.getrandbits(128)))),
        ("sonar", "SONAR_TOKEN=squ_" + _r(rng, HEX, 40)),
        ("codecov", "CODECOV_TOKEN=" + str(uuid.UUID(int=rng.getrandbits(128)))),
        ("twitch", "TWITCH_CLIENT_SECRET=" + _r(rng, "abcdefghijklmnopqrstuvwxyz0123456789", 30)),
        ("plaid", "PLAID_SECRET=" + _r(rng, HEX, 30)),
        ("binance", "BINANCE_API_SECRET=" + _r(rng, ALNUM, 64)),
        ("kraken", "kraken private key: " + base64.b64encode(rng.randbytes(64)).decode()),
        ("eth-private-key", "wallet private key 0x" + _r(rng, HEX, 64)),
        ("btc-wif", "WIF: " + rng.choice("KL") + _r(rng, B58, 51)),
        ("jenkins", "JENKINS_API_TOKEN=11" + _r(rng, HEX, 32)),
        ("confluent", "CONFLUENT_API_SECRET=" + _r(rng, ALNUM + "+/", 64)),
        (
            "elastic",
            "ELASTIC_API_KEY="
            + base64.b64encode(f"{_r(rng, ALNUM, 20)}:{_r(rng, ALNUM, 22)}".encode()).decode(),
        ),
        ("auth0", "AUTH0_CLIENT_SECRET=" + _r(rng, ALNUM + "-_", 64)),
        ("keycloak", "KEYCLOAK_CLIENT_SECRET=" + _r(rng, ALNUM, 32)),
        (
            "npm-legacy",
            "//registry.npmjs.org/:_authToken=" + str(uuid.UUID(int=rng.getrandbits(128))),
        ),
        (
            "docker-auth",
            '{"auths": {"registry.internal": {"auth": "'
            + base64.b64encode(f"ci:{_pw(rng)}".encode()).decode()
            + '"}}}',
        ),
        ("harbor-robot", "robot$ci+deploy secret: " + _r(rng, ALNUM, 32)),
        ("fastly", "FASTLY_API_TOKEN=" + _r(rng, ALNUM + "-_", 32)),
        ("wireguard-psk", "PresharedKey = " + base64.b64encode(rng.randbytes(32)).decode()),
        (
            "monero-seed",
            "monero seed: "
            + " ".join(
                rng.choice(
                    [
                        "ablaze",
                        "abort",
                        "acidic",
                        "adept",
                        "aerial",
                        "afield",
                        "agenda",
                        "aglow",
                        "aisle",
                        "alkaline",
                        "alley",
                        "amidst",
                        "ammo",
                        "anvil",
                        "apex",
                        "arena",
                        "argue",
                        "army",
                        "asylum",
                        "atlas",
                        "avatar",
                        "awkward",
                        "axle",
                        "bagpipe",
                        "balding",
                        "bamboo",
                    ]
                )
                for _ in range(25)
            ),
        ),
    ]
    for kind, line in tokens:
        secret = (
            line.split("=", 1)[1]
            if "=" in line.split(": ", 1)[0] and not line.startswith("{")
            else line.split(": ", 1)[-1]
        )
        if kind == "docker-auth":
            secret = line.split('"auth": "')[1].split('"')[0]
        if kind == "npm-legacy":
            secret = line.split("=", 1)[1]
        lang = rng.choice(["en", "de", "fr", "zh", "ja", "ko", "es"])
        add(kind, lang, f"# Keys\n\n{line}\n", secret)

    # Paths other than the corpus' own.
    for path_kind, name in (
        ("folder", "Passwörter/bank.md"),
        ("folder", "vault-private/x.md"),
        ("folder", "credentials/aws.md"),
    ):
        pw = _pw(rng)
        add(f"path-{path_kind}", "en", f"# x\n\nbank {pw}\n", pw)
        out[-1] = (out[-1][0] + "|" + name, *out[-1][1:])
    return out


def _benign_templates(rng: random.Random) -> list[tuple[str, str, str]]:
    """(kind, lang, text)."""
    sha = _r(rng, HEX, 40)
    digest = _r(rng, HEX, 64)
    u = str(uuid.UUID(int=rng.getrandbits(128)))
    items = [
        (
            "de-forgot",
            "de",
            "Passwort vergessen? Klicke auf „Passwort zurücksetzen“ und folge der E-Mail.",
        ),
        ("de-policy", "de", "Kennwortrichtlinie: mindestens 12 Zeichen, kein Ablauf ohne Anlass."),
        ("fr-forgot", "fr", "Mot de passe oublié : utilisez le lien de réinitialisation."),
        ("fr-crypto", "fr", "Cryptographie : AES-256, RSA-4096, courbes elliptiques (P-384)."),
        (
            "es-policy",
            "es",
            "La contraseña debe tener al menos 10 caracteres. Contraseña: usa un gestor.",
        ),
        ("pt-reset", "pt", "Esqueceu a senha? Senha: redefinir pelo portal."),
        (
            "ru-policy",
            "ru",
            "Пароль должен быть не короче 12 символов. Пароль: хранится в виде хеша (bcrypt).",
        ),
        ("vi-note", "vi", "Mật khẩu phải có ít nhất 8 ký tự."),
        ("tr-note", "tr", "Şifrenizi unuttuysanız 'Şifremi unuttum' bağlantısına tıklayın."),
        ("pl-note", "pl", "Hasło: minimum 12 znaków, bez wygasania."),
        ("id-note", "id", "Kata sandi disimpan sebagai hash argon2id."),
        ("zh-note", "zh", "密码复杂度要求：大小写字母加数字，至少 12 位。密码：由 KMS 管理。"),
        ("ja-note", "ja", "パスワードの再設定はメールのリンクから行ってください。PW：各自で設定"),
        ("ko-note", "ko", "비밀번호 재설정은 메일 링크로 진행합니다. 비번: 각자 설정"),
        (
            "ansible-vault",
            "en",
            "db_password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  " + _r(rng, "0123456789", 64),
        ),
        (
            "gha-secret",
            "en",
            "env:\n  TOKEN: ${{ secrets.DEPLOY_TOKEN }}\n  PASSWORD: ${{ secrets.DB_PASSWORD }}",
        ),
        (
            "terraform-var",
            "en",
            'admin_password = var.admin_password\napi_key = data.vault_generic_secret.api.data["key"]',
        ),
        (
            "k8s-ref",
            "en",
            "env:\n- name: DB_PASSWORD\n  valueFrom:\n    secretKeyRef:\n      name: db\n      key: password",
        ),
        (
            "cisco-hash",
            "en",
            "enable secret 9 $9$" + _r(rng, ALNUM + "./", 14) + "$" + _r(rng, ALNUM + "./", 43),
        ),
        ("bcrypt", "en", "stored as $2y$10$" + _r(rng, ALNUM + "./", 53)),
        (
            "lfs-pointer",
            "en",
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize 12345",
        ),
        (
            "go-sum",
            "en",
            f"golang.org/x/text v0.14.0 h1:{base64.b64encode(rng.randbytes(32)).decode()}",
        ),
        (
            "nix-path",
            "en",
            f"/nix/store/{_r(rng, 'abcdfghijklmnpqrsvwxyz0123456789', 32)}-python3-3.12.1",
        ),
        ("csproj-guid", "en", f"<ProjectGuid>{{{u.upper()}}}</ProjectGuid>"),
        ("eth-address", "en", "send to 0x" + _r(rng, HEX, 40)),
        ("git-log", "de", f"Commit {sha} behebt den Fehler."),
        ("sha-table", "fr", f"| fichier | sha256 |\n|---|---|\n| a.iso | {digest} |"),
        ("uuid-ru", "ru", f"идентификатор заказа: {u}"),
        ("docs-placeholder", "en", "export API_KEY=<your-api-key>\nexport PASSWORD=********"),
        ("maven-placeholder", "en", "<password>${env.NEXUS_PASSWORD}</password>"),
        ("spring-placeholder", "en", "spring.datasource.password=${DB_PASSWORD}"),
        ("xml-placeholder", "en", '<add key="SmtpPassword" value="" />'),
        ("ps-prompt", "en", "$cred = Get-Credential\n$pw = Read-Host -AsSecureString"),
        ("wpa-doc", "en", 'psk="your-wifi-password"'),
        ("csv-header", "en", "url,username,password\n(export template, no rows)"),
        ("sqlplus-doc", "en", "sqlplus username/password@//host:port/service"),
        (
            "minified",
            "en",
            '!function(e,t){"object"==typeof exports?module.exports=t():e.lib=t()}(this,function(){return 42});',
        ),
        ("latex", "en", "$$\\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}$$"),
        ("chem", "en", "C6H12O6 + 6O2 -> 6CO2 + 6H2O"),
        ("phone", "de", "Telefon: +49 30 1234567, Fax: +49 30 7654321"),
        ("product-key-doc", "en", "Windows product keys look like XXXXX-XXXXX-XXXXX-XXXXX-XXXXX."),
        (
            "pgp-public",
            "en",
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n"
            + base64.b64encode(rng.randbytes(96)).decode()
            + "\n-----END PGP PUBLIC KEY BLOCK-----",
        ),
        (
            "ssh-known-hosts",
            "en",
            "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
        ),
        (
            "tldr-like",
            "en",
            "- Log in with a password:\n\n`mysql -u {{user}} -p`\n\n- Use a token:\n\n`gh auth login --with-token < {{token.txt}}`",
        ),
        ("secret-word-prose", "en", "The secret ingredient is time. Key takeaways: ship small."),
        ("token-count", "en", "prompt_tokens: 1532\ncompletion_tokens: 211\ntotal_tokens: 1743"),
        (
            "api-key-header-doc",
            "en",
            "Send the header `X-API-Key: <key>`; keys are 32 hex characters.",
        ),
        ("keyboard", "en", "Keyboard shortcuts: Ctrl+Shift+P opens the palette; Alt+F4 closes."),
        ("sha-in-prose-ja", "ja", f"コミット {sha[:10]} で修正済み。"),
        ("uuid-ko", "ko", f"요청 ID: {u}"),
    ]
    names = [
        ("de", "Passwort-Richtlinie.md", "Passwörter werden mit Argon2id gehasht."),
        ("fr", "mots-de-passe-conseils.md", "Utilisez un gestionnaire de mots de passe."),
        ("es", "contraseñas-seguras.md", "Una contraseña larga es mejor que una compleja."),
        ("ru", "пароли.md", "Используйте менеджер паролей."),
        (
            "en",
            "secret-sharing-shamir.md",
            "Shamir's secret sharing splits a secret into n shares, k needed.",
        ),
        (
            "en",
            "tokens-and-tokenizers.md",
            "BPE merges frequent pairs; SentencePiece works on raw text.",
        ),
        ("en", "keys-and-locks.md", "Bought new door keys; the locksmith charged 40 EUR."),
        (
            "en",
            "private-notes-on-books.md",
            "Reading list: Dune, Hyperion, The Left Hand of Darkness.",
        ),
        ("zh", "口令规范.md", "口令长度不少于 12 位，口令：禁止写入代码仓库。"),
        ("ja", "パスワード運用.md", "パスワードは 90 日ごとの変更を廃止した。"),
    ]
    out = [(kind, lang, f"# Notes\n\n{text}\n") for kind, lang, text in items]
    out += [(f"name|{name}", lang, f"# {name[:-3]}\n\n{text}\n") for lang, name, text in names]
    return out


def dialects_corpus() -> list[Sample]:
    rng = random.Random(SEED)
    samples: list[Sample] = []
    for i, (kind, lang, text, secret) in enumerate(_secret_templates(rng)):
        path = f"late/secret/{i:03d}.md"
        if "|" in kind:
            kind, path = kind.split("|", 1)
        samples.append(
            Sample(f"late/{kind}#{i}", kind, "late", lang, "late", path, text, (secret,), "late")
        )
    for i, (kind, lang, text) in enumerate(_benign_templates(rng)):
        path = f"late/benign/{i:03d}.md"
        if "|" in kind:
            kind, path = kind.split("|", 1)
            path = f"late/benign/{path}"
        samples.append(
            Sample(f"late/{kind}#{i}", kind, "late", lang, "late", path, text, (), "late")
        )
    return samples
