"""Secrets recognised by their shape in free text: URL passwords, ``Authorization`` headers,
JWTs, cloud keys, private key blocks and tokens with a published prefix.

Each pattern starts with a literal (or case-insensitive letters) and runs only when a cheap
substring guard is present, so a multi-MB NCCL log is scanned in a fraction of a second.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from preflight.report.secret_names import REDACTED


@dataclass(frozen=True, slots=True)
class _ShapeRule:
    """A secret shape. ``guards``: literals (lower case when ``fold``) one of which must occur
    in the text before the regex runs at all, which keeps multi-MB logs fast."""

    name: str
    pattern: re.Pattern[str]
    replace: str | Callable[[re.Match[str]], str]
    guards: tuple[str, ...]
    fold: bool = False


def _keep_prefix(match: re.Match[str]) -> str:
    return match.group("prefix") + REDACTED


def _keep_groups(*names: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        return "".join(match.group(name) or "" for name in names) + REDACTED

    return replace


def _any_case(word: str) -> str:
    """``bearer`` -> ``[Bb][Ee]...``: unlike ``re.IGNORECASE`` this keeps the regex engine's
    fast scan for the first character."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)


def _prefixed(prefix: str, body: str, min_length: int) -> re.Pattern[str]:
    """A token that starts with the literal ``prefix`` (not glued to a longer word) followed by
    at least ``min_length`` characters of ``body``. The boundary is a look-behind placed after
    the literal so the engine can still search for the literal quickly."""
    literal = re.escape(prefix)
    return re.compile(
        rf"(?P<prefix>{literal})(?<![A-Za-z0-9_\-]{literal})[{body}]{{{min_length},}}"
        r"[A-Za-z0-9_\-]*"
    )


_TOKEN_PREFIXES: tuple[tuple[str, str, int], ...] = (
    ("hf_", "A-Za-z0-9", 30),  # Hugging Face
    ("ghp_", "A-Za-z0-9", 30),  # GitHub personal, OAuth, user, server, refresh tokens
    ("gho_", "A-Za-z0-9", 30),
    ("ghu_", "A-Za-z0-9", 30),
    ("ghs_", "A-Za-z0-9", 30),
    ("ghr_", "A-Za-z0-9", 30),
    ("github_pat_", "A-Za-z0-9_", 30),
    ("glpat-", r"A-Za-z0-9_\-", 20),  # GitLab
    ("xoxb-", r"A-Za-z0-9\-", 10),  # Slack bot, user, app tokens
    ("xoxp-", r"A-Za-z0-9\-", 10),
    ("xoxa-", r"A-Za-z0-9\-", 10),
    ("xoxr-", r"A-Za-z0-9\-", 10),
    ("xoxs-", r"A-Za-z0-9\-", 10),
    ("xapp-", r"A-Za-z0-9\-", 10),
    ("sk-ant-", r"A-Za-z0-9_\-", 20),  # Anthropic (before the OpenAI "sk-")
    ("sk-", r"A-Za-z0-9_\-", 20),  # OpenAI
    ("sk_live_", "A-Za-z0-9", 16),  # Stripe
    ("sk_test_", "A-Za-z0-9", 16),
    ("rk_live_", "A-Za-z0-9", 16),
    ("npm_", "A-Za-z0-9", 30),
    ("pypi-", r"A-Za-z0-9_\-", 50),
    ("nvapi-", r"A-Za-z0-9_\-", 20),  # NVIDIA NGC / API catalog
    ("dapi", "0-9a-f", 32),  # Databricks
    ("AIza", r"A-Za-z0-9_\-", 35),  # Google Cloud API key
    ("ya29.", r"A-Za-z0-9_\-", 20),  # Google OAuth access token
    ("GOCSPX-", r"A-Za-z0-9_\-", 20),  # Google OAuth client secret
)
"""Tokens recognised by a published prefix: (prefix, body characters, shortest body)."""

_AUTH_SCHEME_NAMES = "bearer|basic|digest|token|bot|negotiate|apikey|sso-key"
_AUTHORIZATION = _any_case("authorization")
_BEARER = _any_case("bearer")

_SHAPE_RULES: tuple[_ShapeRule, ...] = (
    _ShapeRule(
        "url-userinfo",
        re.compile(r"(?P<keep>://[^\s/?#@:'\"<>]*:)[^\s/?#'\"<>]*@"),
        lambda m: m.group("keep") + REDACTED + "@",
        ("://",),
    ),
    _ShapeRule(
        "authorization-header",
        re.compile(
            rf"(?P<head>{_AUTHORIZATION}(?<![A-Za-z0-9_]{_AUTHORIZATION})"
            r"[\"']?[ \t]*[:=][ \t]*[\"']?)"
            rf"(?P<scheme>(?i:{_AUTH_SCHEME_NAMES})[ \t]+)?"
            rf"(?!\[REDACTED)(?!(?i:{_AUTH_SCHEME_NAMES})[ \t])"
            r"[^\s\"',;]+"
        ),
        _keep_groups("head", "scheme"),
        ("authorization",),
        fold=True,
    ),
    _ShapeRule(
        "bearer",
        re.compile(
            rf"(?P<prefix>{_BEARER}(?<![A-Za-z0-9_]{_BEARER})[ \t]+)"
            r"(?!\[REDACTED)[A-Za-z0-9\-._~+/]{8,}=*"
        ),
        _keep_prefix,
        ("bearer",),
        fold=True,
    ),
    _ShapeRule(
        "jwt",
        re.compile(
            r"eyJ(?<![A-Za-z0-9_\-]eyJ)[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
        ),
        REDACTED,
        ("eyJ",),
    ),
    _ShapeRule(
        "aws-access-key-id",
        re.compile(r"(?P<prefix>A(?:KIA|SIA))(?<![A-Za-z0-9]A[KS]IA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        _keep_prefix,
        ("AKIA", "ASIA"),
    ),
    _ShapeRule(
        "azure-client-secret",
        re.compile(r"(?<![\w~.\-])[A-Za-z0-9_~.\-]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34}(?![\w~.\-])"),
        REDACTED,
        ("Q~",),
    ),
    *(
        _ShapeRule(f"token-prefix {prefix}", _prefixed(prefix, body, length), _keep_prefix, (prefix,))
        for prefix, body, length in _TOKEN_PREFIXES
    ),
)

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY_LINE = re.compile(r"[ \t]*(?:[A-Za-z0-9+/=]+|[A-Za-z-]+: .*)[ \t]*\r?(?:\n|$)")


def _redact_private_keys(text: str) -> str:
    """Replace each PEM private key block, BEGIN to END; a block cut short (no END line) is
    removed as far as its base64 body goes."""
    pieces: list[str] = []
    position = 0
    while (begin := _PEM_BEGIN.search(text, position)) is not None:
        pieces.append(text[position : begin.start()])
        end = _PEM_END.search(text, begin.end())
        if end is not None:
            position = end.end()
        else:
            position = begin.end()
            if text.startswith("\n", position):
                position += 1
            while position < len(text):
                line = _PEM_BODY_LINE.match(text, position)
                if line is None or line.end() == position:
                    break
                position = line.end()
        pieces.append(f"{REDACTED[:-1]} PRIVATE KEY]")
    pieces.append(text[position:])
    return "".join(pieces)


_USER = re.compile(r"[A-Za-z_][A-Za-z0-9._%+\-]*")
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9\-]+)*)"
                   r"(?![A-Za-z0-9_\-@])")
_WORD_STOPS = frozenset(" \t\r\n\"'`<>=,;()[]{}|")
_DIGEST_HOSTS = ("sha256:", "sha384:", "sha512:")  # ubuntu:22.04@sha256:...: an image pinned by digest
_NOT_USERS = frozenset({"mailto"})
_LOOK_BACK = 256


def _redact_schemeless_userinfo(text: str) -> str:
    """``admin:pw@10.0.0.5`` (a ``MASTER_ADDR`` or a proxy setting without a scheme): the password goes, the user
    and host stay. Found from each ``@``: the word before it must be ``user:password`` with a user-name-like user
    (no ``/``, so ``nvcr.io/nvidia/pytorch:24.01@sha256:...`` is not one), and a host-like word must follow."""
    pieces: list[str] = []
    copied_to = 0
    at = text.find("@")
    while at >= 0:
        start = at
        while start > max(copied_to, at - _LOOK_BACK) and text[start - 1] not in _WORD_STOPS:
            start -= 1
        while start < at and text[start] == ":":
            start += 1  # "[rank0]:admin:pw@host": torchrun's line prefix ends in a colon
        word = text[start:at]
        user, colon, password = word.partition(":")
        host = _HOST.match(text, at + 1)
        if (colon and password and "://" not in word and _USER.fullmatch(user) and user.lower() not in _NOT_USERS
                and host is not None and not text.startswith(_DIGEST_HOSTS, at + 1)):
            pieces.append(text[copied_to : start + len(user) + 1])
            pieces.append(REDACTED)
            copied_to = at
        at = text.find("@", at + 1)
    if not pieces:
        return text
    pieces.append(text[copied_to:])
    return "".join(pieces)


def redact_shapes(text: str) -> str:
    """``text`` with every secret recognised by its shape replaced."""
    if "PRIVATE KEY" in text:
        text = _redact_private_keys(text)
    if "@" in text and ":" in text:
        text = _redact_schemeless_userinfo(text)
    lowered: str | None = None
    for rule in _SHAPE_RULES:
        haystack = text
        if rule.fold:
            lowered = text.lower() if lowered is None else lowered
            haystack = lowered
        if any(guard in haystack for guard in rule.guards):
            new_text = rule.pattern.sub(rule.replace, text)
            if new_text != text:
                text, lowered = new_text, None
    return text
