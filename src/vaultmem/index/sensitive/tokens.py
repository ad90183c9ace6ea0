"""Vendor token formats: a key, token or private key recognised by its documented shape
(prefix, alphabet, length), wherever in the note it stands.

Design decision: detect-secrets supplies part of the detectors (their compiled `denylist`
patterns, used directly: no global settings, no network verification), each pattern that
backtracks over the square of a line replaced by a linear equivalent; vaultmem adds about
seventy formats of its own. Every pattern is gated by literals (a prefix) and searched only on
the lines holding one. Their rule ids are HIGH_CONFIDENCE_RULES: credentials beyond doubt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from re import Match, Pattern
from typing import cast

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector

from .note import _Hit, _Note
from .values import _char_classes, _is_doc_jwt, _token_placeholder, is_placeholder

# --- detect-secrets token-format detectors ---------------------------------------------------
# Kept where they are good (their AWS, GitHub, GitLab, JWT, private-key, Slack, Stripe... patterns
# are exact); Twilio's is not used: it flags `AC…` account SIDs, which are public identifiers.

_PLUGINS: tuple[tuple[str, type[RegexBasedDetector]], ...] = (
    ("aws-access-key", AWSKeyDetector),
    ("artifactory-token", ArtifactoryDetector),
    ("azure-storage-key", AzureStorageKeyDetector),
    ("basic-auth-url", BasicAuthDetector),
    ("cloudant-credentials", CloudantDetector),
    ("discord-bot-token", DiscordBotTokenDetector),
    ("github-token", GitHubTokenDetector),
    ("gitlab-token", GitLabTokenDetector),
    ("ibm-cloud-iam-key", IbmCloudIamDetector),
    ("ibm-cos-hmac", IbmCosHmacDetector),
    ("jwt", JwtTokenDetector),
    ("mailchimp-key", MailchimpDetector),
    ("npm-token", NpmDetector),
    ("openai-key", OpenAIDetector),
    ("private-key", PrivateKeyDetector),
    ("pypi-token", PypiTokenDetector),
    ("sendgrid-key", SendGridDetector),
    ("slack-token", SlackDetector),
    ("softlayer-credentials", SoftlayerDetector),
    ("square-oauth-secret", SquareOAuthDetector),
    ("stripe-key", StripeDetector),
    ("telegram-bot-token", TelegramBotTokenDetector),
)


_KEYWORDS = ("key", "pwd", "pass", "token")
# Their key is `(cloudant|cl|clou)[_-]?(api)?(key|pwd|pw|password|pass|token)`: these literals
# cover every spelling without running the pattern on every line holding "cl".
_CL_GATE = tuple(
    p + s + k
    for p in ("cl", "clou", "cloudant")
    for s in ("", "_", "-")
    for k in ("key", "pw", "pass", "token", "api")
)
_SL_GATE = tuple(
    p + s + k for p in ("sl", "softlayer") for s in ("", "_", "-") for k in _KEYWORDS + ("api",)
)
# rule id -> one gate per denylist pattern: (literals, line mode). Derived from the patterns.
_Gate = tuple[tuple[str, ...], bool]
_PLUGIN_GATES: dict[str, list[_Gate]] = {
    "aws-access-key": [(("akia", "asia", "abia", "acca", "a3t"), False), (("aws",), True)],
    "artifactory-token": [(("akc",), False), ((), False)],
    "azure-storage-key": [(("accountkey=",), False)],
    "basic-auth-url": [(("://",), True)],
    "cloudant-credentials": [
        (_CL_GATE, True),
        (_CL_GATE, True),
        (("cloudant.com",), False),
        (("cloudant.com",), False),
    ],
    "github-token": [(("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), False)],
    "gitlab-token": [
        (("glpat-", "gldt-", "glft-", "glsoat-", "glrt-"), False),
        (("gr1348941",), False),
        (("glcbt-",), False),
        (("glimt-",), False),
        (("glptt-",), False),
        (("glagent-",), False),
        (("gloas-",), False),
    ],
    "ibm-cloud-iam-key": [(_KEYWORDS, True)],
    "ibm-cos-hmac": [(("secret",), True)],
    "jwt": [(("eyj",), False)],
    "mailchimp-key": [(("-us",), False)],
    "npm-token": [(("_authtoken",), False)],
    "openai-key": [(("t3blbkfj",), False)],
    "private-key": [(("private key", "putty-user-key", "ssh2 encrypted"), False)] * 8,
    "pypi-token": [(("pypi-",), False)] * 2,
    "sendgrid-key": [(("sg.",), False)],
    "slack-token": [(("xox",), False), (("hooks.slack.com",), False)],
    "softlayer-credentials": [(_SL_GATE, True), (("api.softlayer.com",), False)],
    "square-oauth-secret": [(("sq0csp-",), False)],
    "stripe-key": [(("k_live_",), False)],
}


# Upstream patterns that backtrack over the square of a line, and their linear equivalents.
# ` *` / ` +` / ` *` around the operator retry every split of a run of spaces; a JWT, npm or
# OpenAI pattern retried from each `eyJ` / `//` / `sk-` inside one long run re-reads the run.
_SPACED_OPERATOR = "(?: *)(?:=|:|:=|=>| +|::)(?: *)"
_LINEAR_OPERATOR = "(?: *+)(?:(?:=>|:=|::|=|:)(?: *+)|(?<= ))"
_LINEAR_PLUGIN_PATTERNS = {
    r"eyJ[A-Za-z0-9-_=]+\.[A-Za-z0-9-_=]+\.?[A-Za-z0-9-_.+/=]*?": (
        r"(?<![A-Za-z0-9_=-])eyJ[A-Za-z0-9_=-]++\.[A-Za-z0-9_=-]++\.?[A-Za-z0-9_.+/=-]*?"
    ),
    r"\/\/.+\/:_authToken=\s*((npm_.+)|([A-Fa-f0-9-]{36})).*": (
        r"(?<!/)//[^\s]{1,256}?/:_authToken=[ \t]*+((npm_\S+)|([A-Fa-f0-9-]{36}))"
    ),
    r"sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}": (
        r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}"
    ),
}


def _linear(pattern: str) -> str:
    pattern = _LINEAR_PLUGIN_PATTERNS.get(pattern, pattern)
    return pattern.replace(_SPACED_OPERATOR, _LINEAR_OPERATOR)


def _plugin_patterns() -> tuple[tuple[str, Pattern[str], tuple[str, ...], bool], ...]:
    # Their patterns were written for single lines: MULTILINE keeps ^/$ per line on a whole note.
    out = []
    for rule_id, plugin in _PLUGINS:
        gates = _PLUGIN_GATES.get(rule_id, [])
        # `denylist` is a class attribute (typed as an abstract property upstream).
        patterns = cast("Iterable[Pattern[str]]", plugin.denylist)
        for i, pattern in enumerate(patterns):
            gate, lines = gates[i] if i < len(gates) else ((), False)
            # Tokens never span lines: search only the lines holding the prefix.
            lines = lines or (bool(gate) and rule_id != "private-key")
            compiled = re.compile(_linear(pattern.pattern), pattern.flags | re.MULTILINE)
            out.append((rule_id, compiled, gate, lines))
    return tuple(out)


_PLUGIN_PATTERNS = _plugin_patterns()


def _secret_span(m: Match[str]) -> tuple[int, int, str]:
    """The longest capture group when it is the secret itself, else the whole match.

    detect-secrets reports the first non-empty group, which for some patterns is only a prefix
    (`(ghp|gho)_…` yields "ghp"); a group shorter than 8 characters is taken to be such a prefix.
    """
    groups = [i for i in range(1, (m.re.groups or 0) + 1) if m.group(i)]
    best = max(groups, key=lambda i: len(m.group(i)), default=0)
    if best and len(m.group(best)) >= 8:
        return m.start(best), m.end(best), m.group(best)
    return m.start(), m.end(), m.group()


def _plugin_hits(note: _Note) -> Iterable[_Hit]:
    for rule_id, pattern, gate, lines in _PLUGIN_PATTERNS:
        for m, shift in note.find(pattern, gate, lines):
            if rule_id == "basic-auth-url":
                start, end, value = m.start(1), m.end(1), m.group(1)
            else:
                start, end, value = _secret_span(m)
            value = value.strip()
            if rule_id == "jwt" and (
                not JwtTokenDetector.is_formally_valid(value) or _is_doc_jwt(value)
            ):
                continue
            if rule_id == "basic-auth-url":
                user = m.string[m.string.rfind("/", 0, start) + 1 : start].rstrip(":")
                if is_placeholder(value) or value == user:
                    continue
            elif rule_id != "private-key" and _token_placeholder(value):
                continue  # AWS's documented AKIAIOSFODNN7EXAMPLE, ghp_XXXX…, and kin
            preview = None
            if rule_id == "private-key":
                preview = f"-----{value}-----"
            yield _Hit(start + shift, end + shift, rule_id, value, 0, preview)


# --- vaultmem's own token formats ------------------------------------------------------------
# Written from the vendors' documented shapes (prefix, alphabet, length); gitleaks' and
# trufflehog's public rule sets were read as references for those shapes. Each entry: rule id,
# pattern (the secret is its longest group of 8+ characters, else the whole match), gate literals.

_B = r"(?<![A-Za-z0-9_\-])"  # a token starts at a boundary: not inside a longer word
_E = r"(?![A-Za-z0-9_\-])"
_TOKEN_RULES: tuple[tuple[str, Pattern[str], tuple[str, ...]], ...] = tuple(
    (rule_id, re.compile(pattern), gate)
    for rule_id, pattern, gate in (
        ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}", ("sk-ant-",)),
        (
            "openai-key",
            r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{32,}",
            ("sk-",),
        ),
        ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}", ("aiza",)),
        ("google-oauth-secret", r"\bGOCSPX-[A-Za-z0-9_\-]{24,}", ("gocspx-",)),
        ("google-refresh-token", _B + r"1//0[A-Za-z0-9_\-]{40,}", ("1//0",)),
        ("github-token", r"\bgithub_pat_[A-Za-z0-9_]{40,}", ("github_pat_",)),
        ("github-token", _B + r"gh[pousr]_[A-Za-z0-9]{36,255}" + _E, ("gh",)),
        (
            "gitlab-token",
            _B + r"gl(?:pat|rt|dt|ft|soat|cbt|imt|ptt|agent|oas)-[\w\-]{20,}",
            ("gl",),
        ),
        ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}", ("hf_",)),
        ("slack-token", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{20,}", ("xapp-",)),
        ("slack-token", _B + r"xox[abposre]-[A-Za-z0-9\-]{20,}", ("xox",)),
        (
            "slack-webhook",
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+\-]{20,}",
            ("hooks.slack.com",),
        ),
        ("stripe-key", _B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", ("k_live_", "k_test_")),
        ("stripe-webhook-secret", _B + r"whsec_[A-Za-z0-9+/]{24,}", ("whsec_",)),
        ("twilio-key", _B + r"SK[0-9a-fA-F]{32}" + _E, ("sk",)),
        ("sendgrid-key", _B + r"SG\.[\w\-]{16,32}\.[\w\-]{32,64}", ("sg.",)),
        ("mailgun-key", _B + r"key-[0-9a-f]{32}" + _E, ("key-",)),
        ("npm-token", _B + r"npm_[A-Za-z0-9]{36}" + _E, ("npm_",)),
        ("pypi-token", r"pypi-AgEIcHlwaS5vcmc[\w\-]{50,}", ("pypi-",)),
        (
            "azure-ad-client-secret",
            _B + r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}" + _E,
            ("q~",),
        ),
        (
            "azure-shared-access-key",
            r"(?i)SharedAccess(?:Key|Signature)\s*=\s*([A-Za-z0-9+/%]{30,}={0,2})",
            ("sharedaccess",),
        ),
        (
            "heroku-key",
            _B + r"HRKU-(?:AA[\w\-]{58}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f-]{22})",
            ("hrku-",),
        ),
        ("digitalocean-token", _B + r"do[opr]_v1_[a-f0-9]{64}" + _E, ("_v1_",)),
        ("vault-token", _B + r"hv[sbr]\.[A-Za-z0-9_\-]{24,}", ("hvs.", "hvb.", "hvr.")),
        ("terraform-token", r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-=]{60,}", ("atlasv1",)),
        (
            "age-secret-key",
            r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
            ("age-secret",),
        ),
        ("replicate-token", _B + r"r8_[A-Za-z0-9]{37}" + _E, ("r8_",)),
        ("groq-key", _B + r"gsk_[A-Za-z0-9]{48,}", ("gsk_",)),
        ("xai-key", _B + r"xai-[A-Za-z0-9]{70,}", ("xai-",)),
        ("perplexity-key", _B + r"pplx-[A-Za-z0-9]{40,}", ("pplx-",)),
        ("shopify-token", _B + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _E, ("shp",)),
        ("square-token", _B + r"(?:EAAA[\w\-]{60}|sq0atp-[\w\-]{22})" + _E, ("eaaa", "sq0atp-")),
        (
            "discord-webhook",
            r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/([\w\-]{60,})",
            ("/api/webhooks/",),
        ),
        ("atlassian-token", _B + r"ATATT3[A-Za-z0-9_\-=]{150,}", ("atatt3",)),
        ("bitbucket-app-password", _B + r"ATBB[A-Za-z0-9]{32}" + _E, ("atbb",)),
        ("linear-key", _B + r"lin_(?:api|oauth)_[A-Za-z0-9]{40}" + _E, ("lin_",)),
        (
            "notion-token",
            _B + r"(?:ntn_[A-Za-z0-9]{40,}|secret_[A-Za-z0-9]{43})" + _E,
            ("ntn_", "secret_"),
        ),
        ("postman-key", _B + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _E, ("pmak-",)),
        ("doppler-token", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}", ("dp.",)),
        ("pulumi-token", _B + r"pul-[a-f0-9]{40}" + _E, ("pul-",)),
        (
            "grafana-token",
            _B + r"(?:glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})",
            ("glsa_", "glc_"),
        ),
        (
            "newrelic-key",
            _B + r"NR(?:AK|JS|II|AA)-[A-Z0-9]{19,32}" + _E,
            ("nrak-", "nrjs-", "nrii-", "nraa-"),
        ),
        ("sentry-token", _B + r"sntr[ysu]_[A-Za-z0-9+/=_\-]{40,}", ("sntr",)),
        ("databricks-token", _B + r"dapi[a-f0-9]{32}(?:-\d)?" + _E, ("dapi",)),
        ("docker-token", _B + r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{27,}", ("dckr_",)),
        ("supabase-token", _B + r"sb[pa]_[a-f0-9]{40}" + _E, ("sbp_", "sba_")),
        ("alibaba-access-key", _B + r"LTAI[A-Za-z0-9]{12,20}" + _E, ("ltai",)),
        ("tencent-secret-id", _B + r"AKID[A-Za-z0-9]{32,36}" + _E, ("akid",)),
        ("volcengine-access-key", _B + r"AKLT[A-Za-z0-9_\-]{40,}", ("aklt",)),
        ("mapbox-token", _B + r"sk\.eyJ[A-Za-z0-9_\-]{30,}\.[A-Za-z0-9_\-]{20,}", ("sk.eyj",)),
        ("facebook-token", _B + r"EAA[BCDG][A-Za-z0-9]{80,}" + _E, ("eaa",)),
        ("firebase-fcm-key", _B + r"AAAA[A-Za-z0-9_\-]{7}:APA91b[A-Za-z0-9_\-]{100,}", ("apa91b",)),
        ("baidu-qianfan-key", r"\bbce-v3/ALTAK-[A-Za-z0-9]{20,}/[a-f0-9]{40}", ("altak-",)),
        ("django-secret-key", r"django-insecure-[^\s'\"`]{30,}", ("django-insecure-",)),
        ("fly-token", r"\bFlyV1 fm\d_[A-Za-z0-9+/=_\-]{40,}", ("flyv1",)),
        ("netlify-token", _B + r"nfp_[A-Za-z0-9]{36,}", ("nfp_",)),
        ("render-key", _B + r"rnd_[A-Za-z0-9]{28,}", ("rnd_",)),
        ("buildkite-token", _B + r"bkua_[a-f0-9]{40}" + _E, ("bkua_",)),
        ("circleci-token", _B + r"CCIPAT_[A-Za-z0-9_]{30,}", ("ccipat_",)),
        ("jfrog-token", _B + r"cmVmdGtuOjAxOj[A-Za-z0-9]{40,}", ("cmvmdgtu",)),
        (
            "braintree-token",
            r"access_token\$production\$[0-9a-z]{16}\$[0-9a-f]{32}",
            ("$production$",),
        ),
        ("okta-token", r"\bSSWS\s+(00[A-Za-z0-9_\-]{40})", ("ssws",)),
        (
            "gcp-service-account",
            r"\"private_key\"\s*:\s*\"(-----BEGIN [A-Z ]*PRIVATE KEY-----)",
            ('"private_key"',),
        ),
        (
            "wireguard-private-key",
            r"(?im)^\s*PrivateKey\s*=\s*([A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=)",
            ("privatekey",),
        ),
        (
            "totp-seed",
            r"(?i)otpauth://[th]otp/[^\s?]*\?(?:[^\s#]*&)?secret=([A-Z2-7]{16,}=*)",
            ("otpauth://",),
        ),
    )
)


def _token_hits(note: _Note) -> Iterable[_Hit]:
    for rule_id, pattern, gate in _TOKEN_RULES:
        # Line-gated: only the lines holding a rule's prefix are searched (a token never spans
        # lines), which keeps seventy patterns cheap on a 1 MB note.
        for m, shift in note.find(pattern, gate, lines=rule_id != "gcp-service-account"):
            start, end, value = _secret_span(m)
            start, end = start + shift, end + shift
            if rule_id == "gcp-service-account":
                yield _Hit(start, end, rule_id, value, 0, '"private_key": "-----BEGIN…"')
            elif (_char_classes(value) >= 2 or rule_id == "totp-seed") and not _token_placeholder(
                value
            ):
                yield _Hit(start, end, rule_id, value, 0)


# Rules whose hits are credentials beyond doubt (a private key, a vendor token with its own
# prefix): `audit allow` asks before indexing a note that has one.
HIGH_CONFIDENCE_RULES = frozenset(
    {rule_id for rule_id, _ in _PLUGINS if rule_id not in ("basic-auth-url", "jwt")}
    | {rule_id for rule_id, _, _ in _TOKEN_RULES}
    | {"private-key", "age-secret-key", "gcp-service-account", "token-in-path"}
)
