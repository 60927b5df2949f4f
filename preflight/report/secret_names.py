"""Which names hold secrets, and blanking the values assigned to them in free text.

``HF_TOKEN=...``, ``--api-key ...``, ``"password": "..."``, ``Authorization: ...``: the value is
replaced when the *name* looks secret, whatever the value looks like.
"""

from __future__ import annotations

import itertools
import re
import string

REDACTED = "[REDACTED]"
"""What a secret is replaced by. Known token prefixes are kept in front of it (``hf_[REDACTED]``)."""

_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")

_SECRET_WORDS = frozenset(
    {
        "token", "secret", "secrets", "password", "passwords", "passwd", "passphrase",
        "credential", "credentials", "creds", "cookie", "cookies", "auth", "authorization",
        "apikey", "accesskey", "secretkey", "privatekey", "authkey", "sessionid", "signature",
        "sig", "bearer", "jwt",
    }
)  # fmt: skip
"""Words that make a name secret wherever they appear in it (``HF_TOKEN``, ``X-Amz-Signature``)."""

_SECRET_INFIXES = ("secret", "passw", "credential", "apikey")
_SECRET_SUFFIXES = ("token", "cookie", "auth", "privatekey", "accesskey", "secretkey")

_SECRET_LAST_WORDS = frozenset({"key", "pass", "pwd"})
"""Secret only as the last word of a longer name: ``WANDB_API_KEY``, ``DB_PASS``; not ``PWD``,
``pass`` (a count in a summary) or ``NCCL_IB_PKEY`` (an InfiniBand partition key)."""

_SECRET_PAIRS = frozenset({("session", "id"), ("access", "key"), ("private", "key")})

_WHERE_WORDS = frozenset({"file", "filename", "path", "dir", "directory", "location"})
"""A last word saying the value is *where* a secret lives (``--token-file``, ``HF_TOKEN_PATH``):
the path is useful evidence and not itself secret."""


def _name_words(name: str) -> list[str]:
    return [word.lower() for word in _NAME_WORD.findall(name)]


def is_secret_name(name: str) -> bool:
    """Whether a variable, option or field called ``name`` probably holds a secret.

    Works on the words of the name (split on punctuation and camelCase), so ``tokenizer``,
    ``max_tokens``, ``author`` and ``session`` (a pytest session block) are not secret while
    ``HF_TOKEN``, ``hfToken``, ``OAUTH``, ``client_secret``, ``AccountKey`` and ``DB_PASS`` are.
    """
    words = _name_words(name)
    if words and words[-1] in _WHERE_WORDS:
        return False
    for word in words:
        if word in _SECRET_WORDS or word.endswith(_SECRET_SUFFIXES):
            return True
        if any(infix in word for infix in _SECRET_INFIXES):
            return True
    if len(words) >= 2 and words[-1] in _SECRET_LAST_WORDS:
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


# ---------------------------------------------------------------------------------------------
# NAME=value, --name value, "name": "value"
# ---------------------------------------------------------------------------------------------

_NAME_STEMS = (
    "token", "secret", "passw", "credential", "creds", "cookie", "auth", "apikey", "session",
    "sig", "key", "pass", "pwd", "bearer", "jwt",
)  # fmt: skip
"""Lower-case pieces, one of which occurs in every name :func:`is_secret_name` accepts."""
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_-.")
_SEPARATOR = re.compile(r"[ \t]*(?P<op>[:=])[ \t]*|(?P<space>[ \t]+)")
_UNQUOTED_VALUE = re.compile(r"[^\s,;&\"'`<>)\]}]+")
_AUTH_SCHEMES = frozenset({"bearer", "basic", "digest", "token", "bot", "negotiate", "apikey"})
_WHOLE_LINE_NAMES = frozenset({"cookie", "set-cookie"})
_NEXT_ELEMENT = re.compile(r"[ \t]*,[ \t]*(?P<quote>\\?[\"'])")
"""The next element of a quoted list (a repr or JSON): ``, '`` or ``, "`` after an option's closing quote."""
_JSON_LITERAL = re.compile(r"(?:null|true|false|-?[0-9][0-9.eE+\-]*)(?![\w.])")


def _opening_quote(text: str, start: int) -> str:
    """The quote right before ``start``: ``"``, ``'``, an escaped ``\\"``/``\\'``, or ``""``."""
    if start >= 1 and text[start - 1] in "\"'":
        if start >= 2 and text[start - 2] == "\\":
            return "\\" + text[start - 1]
        return text[start - 1]
    return ""


def _quoted_value_end(text: str, start: int, quote: str) -> int:
    """Index of the closing ``quote`` for a value starting at ``start`` (end of line if none)."""
    position = start
    line_end = text.find("\n", start)
    limit = len(text) if line_end < 0 else line_end
    while True:
        found = text.find(quote, position, limit)
        if found < 0:
            return limit
        if len(quote) == 1 and found > start and text[found - 1] == "\\":
            position = found + 1
            continue
        return found


def _assigned_value(text: str, name_start: int, name_end: int, name: str) -> tuple[int, int, str]:
    """Locate the value assigned to the name at ``name_start:name_end``.

    Returns ``(start, end, replacement)``; ``start == end`` when nothing should be replaced.
    """
    none = (name_end, name_end, "")
    quote = _opening_quote(text, name_start)
    position = name_end
    if quote and text.startswith(quote, position):
        position += len(quote)
    else:
        quote = ""  # '"--token=abc"': the quote wraps the whole assignment, not the name
    if quote and name.startswith("-") and position > name_end:  # ['--token', 'abc'] or ["--token", "abc"]
        element = _NEXT_ELEMENT.match(text, position)
        if element is not None:
            start = element.end()
            end = _quoted_value_end(text, start, element.group("quote"))
            return (start, end, REDACTED) if end > start and not text.startswith("-", start) else none
    separator = _SEPARATOR.match(text, position)
    if separator is None:
        return none
    if separator.group("space") is not None and not (name.startswith("-") and not quote):
        return none  # "key exchange" is prose; only "--token value" takes a space
    position = separator.end()
    if position >= len(text):
        return none
    for value_quote in ("\\\"", "\\'", '"', "'"):
        if text.startswith(value_quote, position):
            start = position + len(value_quote)
            end = _quoted_value_end(text, start, value_quote)
            return (start, end, REDACTED) if end > start else none
    bare = name.lower().lstrip("-")
    if separator.group("op") == ":" and bare in _WHOLE_LINE_NAMES:
        end = text.find("\n", position)
        return position, len(text) if end < 0 else end, REDACTED
    value = _UNQUOTED_VALUE.match(text, position)
    if value is None or value.group().startswith(("$", "--")):
        return none  # "$HF_TOKEN" names a secret without holding it
    if value.group().lower() in _AUTH_SCHEMES:
        after = _UNQUOTED_VALUE.match(text, value.end() + 1)
        if text[value.end() : value.end() + 1] in (" ", "\t") and after is not None:
            value = after
    if quote and _JSON_LITERAL.match(text, position):
        if value.group() in ("null", "true", "false"):
            return none
        return value.start(), value.end(), f'"{REDACTED}"'  # keep JSON text valid
    return value.start(), value.end(), REDACTED


def _stem_positions(text: str) -> list[int]:
    """Start of every name stem in ``text``; ``str.find`` per stem is far faster than a
    case-insensitive regex alternation on multi-MB logs."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a few non-ASCII letters lower to two characters
        lowered = text.translate(_ASCII_LOWER)
    positions: set[int] = set()
    for stem in _NAME_STEMS:
        found = lowered.find(stem)
        while found >= 0:
            positions.add(found)
            found = lowered.find(stem, found + 1)
    return sorted(positions)


def redact_assignments(text: str) -> str:
    """``text`` with the value of every assignment to a secret-looking name blanked."""
    pieces: list[str] = []
    copied_to = 0
    scanned_to = 0
    for start in _stem_positions(text):
        if start < scanned_to:
            continue  # a second stem inside a name already looked at
        end = start
        while start > 0 and text[start - 1] in _NAME_CHARS:
            start -= 1
        while end < len(text) and text[end] in _NAME_CHARS:
            end += 1
        while end > start and text[end - 1] == ".":
            end -= 1
        scanned_to = end
        name = text[start:end]
        if start < copied_to or not is_secret_name(name):
            continue
        value_start, value_end, replacement = _assigned_value(text, start, end, name)
        if value_end <= value_start or REDACTED[:-1] in text[value_start:value_end]:
            continue
        pieces.append(text[copied_to:value_start])
        pieces.append(replacement)
        copied_to = value_end
        scanned_to = max(scanned_to, value_end)
    if not pieces:
        return text
    pieces.append(text[copied_to:])
    return "".join(pieces)


def is_secret_option(arg: str) -> bool:
    """``--password``, ``--hf_token``, ``--wandb-key``: an option (not ``--x=v``) whose name looks secret, so
    the next argument is its value."""
    return arg.startswith("-") and "=" not in arg and len(arg.lstrip("-")) > 0 and is_secret_name(arg.lstrip("-"))


def redact_argv_values(args: list[str]) -> list[str]:
    """``args`` with the value after each secret-named option blanked (``--token abc`` as two arguments);
    ``--token=abc`` and secrets by shape are left to the text scrubbing every argument also goes through."""
    out = list(args)
    for index, arg in enumerate(args[:-1]):
        value = args[index + 1]
        if is_secret_option(arg) and value and not value.startswith("-") and not value.startswith("$"):
            out[index + 1] = REDACTED
    return out
