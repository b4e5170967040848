"""Scrub text before it leaves the machine (a report, an exported notebook): method point 12,
a precise request with personal data and needless paths removed.

Secrets are found as values, then masked wherever they appear: the values of environment
variables whose names look secret (secret_names.SECRET_ENV_NAMES), what detect-secrets'
detectors find (AWS, GitHub, Slack, JWT, URL credentials, keyword assignments, high-entropy
strings...), and cudadiag's own shapes for what those do not cover (OWN_SECRET_SHAPES:
Hugging Face tokens, newer OpenAI and GitHub tokens, Authorization headers, private key
bodies; WORDLIKE_SECRET_SHAPES: `token VALUE`, `token = VALUE`, where a value that reads as a
word is prose, not a secret). Then the home directory becomes `~`, the user (unless a shared
account such as root) and host names, e-mail and IP addresses are masked, and absolute paths
outside the project are shortened to their last two parts.

Code is scrubbed token by token (`Redactor.code`): only string literals and comments change,
and a cell that parsed still parses.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import getpass
import io
import json
import os
import re
import socket
import tokenize
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cudadiag.privacy.secret_names import masked_value
from cudadiag.privacy.secret_values import NOT_SECRET_VALUES, map_strings, secret_env_values

OWN_SECRET_SHAPES = (
    r"\bhf_[A-Za-z0-9]{10,}",
    r"\bsk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_\-]{20,}",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]+",
    r"(?i)\bauthorization['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token)\s+)?([^\s'\"]{8,})",
    r"(?i)\bx-[\w-]*(?:key|token)['\"]?\s*[:=]\s*['\"]?([^\s'\"]{8,})",
    r"(?i)(?<![\w-])--?(?:\w+[-_])*(?:key|token|secret|passw(?:or)?d|pwd|passphrase"
    r"|credentials?|auth)(?![\w-])(?:=|['\"]?,?\s+['\"]?)([^\s'\"]{6,})",
)
"""Secret shapes detect-secrets does not know (its GitHub detector wants exactly 36
characters, its OpenAI one the old key format, its JWT one stops before the signature, its
keywords do not include `token`), and a command line's secret options (`--api-key VALUE`,
`--hf-token=VALUE`, `'--password', 'VALUE'` in an argv list). A pattern's value is its
first group, else the whole match."""
WORDLIKE_SECRET_SHAPES = (
    r"(?i)\b(?:bearer|basic|token)\s+(['\"]?)([A-Za-z0-9\-._~+/]{8,}=*)",
    r"(?i)(?:token|credential|access_key|secret_key)\w*['\"]?\]?\s*(?:[:=]|[!=]=)\s*(['\"]?)"
    r"([^\s'\"(){}\[\],]{6,})",
)
"""Shapes whose keyword is also an English word or a name in code (`each token directly
reads`, `# tokens = tokenizer.encode(text)`): the value (the second group) counts only when
it is quoted (the first group) or does not read as a word or a dotted name (see
_reads_as_word)."""
_WORD = re.compile(r"[A-Za-z][a-z]*(?:[.\-~][A-Za-z][a-z]*)*[.,;:]?")
"""A word, or words joined by dots or hyphens (`embeddings`, `tokenizer.encode`,
`self-attention`): no digit, no capital inside a word, no `+/=`."""
SHARED_ACCOUNTS = frozenset({"root", "user", "admin", "ubuntu", "jovyan", "runner", "vscode",
                             "codespace", "ec2-user", "colab", "nobody", "docker"})
"""User names that identify no one (containers, notebooks images, CI): also ordinary words
(`the square root`), so they are not masked."""

_PRIVATE_KEY = re.compile(
    r"-----BEGIN[A-Z ]*PRIVATE KEY(?: BLOCK)?-----(.*?)(?:-----END[A-Z ]*PRIVATE KEY"
    r"(?: BLOCK)?-----|\Z)", re.DOTALL)
_KEY_BODY = re.compile(r"(?<!\\)[A-Za-z0-9+/=]{16,}")
"""The base64 runs of a private key (not a `\\n` escape's letter)."""

DETECT_SECRETS_PLUGINS = (
    ("aws", "AWSKeyDetector"), ("artifactory", "ArtifactoryDetector"),
    ("azure_storage_key", "AzureStorageKeyDetector"), ("basic_auth", "BasicAuthDetector"),
    ("discord", "DiscordBotTokenDetector"), ("github_token", "GitHubTokenDetector"),
    ("gitlab_token", "GitLabTokenDetector"), ("jwt", "JwtTokenDetector"),
    ("mailchimp", "MailchimpDetector"), ("npm", "NpmDetector"), ("openai", "OpenAIDetector"),
    ("pypi_token", "PypiTokenDetector"), ("sendgrid", "SendGridDetector"),
    ("slack", "SlackDetector"), ("square_oauth", "SquareOAuthDetector"),
    ("stripe", "StripeDetector"), ("telegram_token", "TelegramBotTokenDetector"),
    ("twilio", "TwilioKeyDetector"),
)
"""detect-secrets' shape detectors used (module in detect_secrets.plugins, class). Its
private-key detector finds only the BEGIN line (the body is masked by _PRIVATE_KEY), its IP
detector is replaced by the address rule below; keywords and entropy are used apart."""
_INDIRECT = re.compile(r"[(\[]")
"""An unquoted keyword value that calls or indexes something names the secret's source."""
HIGH_ENTROPY_MIN_LENGTH = 16
"""Shorter quoted strings are ids and hashes more often than secrets."""

_EMAIL = re.compile(r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b")
_IPV4 = re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b")
_IPV6 = re.compile(
    r"(?<![\w:])(?:(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}"
    r"|(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4})*)?)(?![\w:])"
)
_ABS_PATH = re.compile(r"(?<![\w.~:/])/(?:[\w.\-]+/)+[\w.\-]*")
"""An absolute path; not the path part of a URL (`https://host/a/b`)."""
SECRET = "[REDACTED]"
_FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", None)  # Python 3.12+


@dataclass
class Redactor:
    """Scrubs text for this machine: its secrets, home, user and host names, the project
    root."""

    home: str = field(default_factory=lambda: str(Path.home()))
    user: str = field(default_factory=lambda: _safe(getpass.getuser))
    host: str = field(default_factory=lambda: _safe(socket.gethostname))
    project: str | None = field(default_factory=os.getcwd)
    addresses: bool = True
    """Mask IP addresses (off for version strings such as cuDNN's 9.1.0.70)."""
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """The environment whose secret-looking variables' values are masked."""

    def __post_init__(self) -> None:
        self._env_secrets = secret_env_values(self.env)

    def __call__(self, text: str) -> str:
        """Return `text` scrubbed; never raises."""
        if not text:
            return text
        return self._scrub(text, self.secrets_in(text))

    def code(self, source: str) -> str:
        """Return Python source scrubbed in its string literals and comments only; when
        `source` parses, the result parses (a literal that would not is replaced whole by a
        same-quoted placeholder). Source that does not parse (IPython magics) is scrubbed
        as text."""
        if not source or not _parses(source):
            return self(source)
        secrets = self.secrets_in(source)
        return scrub_literals(source, lambda piece: self._scrub(piece, secrets))

    def strings(self, value: Any) -> Any:
        """Return a copy of a JSON-like value (dicts, lists) with every string scrubbed."""
        return map_strings(value, self)

    def secrets_masked(self, text: str, context: str = "") -> str:
        """Return `text` with only its secret values masked (those found in `text` or in the
        `context` around it, e.g. `name=value`); paths, names and addresses are kept."""
        return _mask(text, self.secrets_in(context or text)) if text else text

    def secrets_masked_in(self, value: Any) -> Any:
        """Return a copy of a JSON-like value with, in every string, the secret values found
        anywhere in it masked: secret environment variables' values and the shapes of
        OWN_SECRET_SHAPES (a command line's `--api-key VALUE` among them), so a value seen
        once is masked in every place. Paths, names, hashes and addresses are kept: the
        value stays a faithful record (`show --json`)."""
        text = json.dumps(value, default=str, ensure_ascii=False)
        found = {secret: masked_value(name) for secret, name in self._env_secrets
                 if secret in text}
        for secret in _own_secrets(text):
            found.setdefault(secret, SECRET)
        return map_strings(value, lambda piece: _mask(piece, found))

    def secrets_in(self, text: str) -> dict[str, str]:
        """Return the secret values `text` holds, each with its placeholder."""
        found = {value: masked_value(name) for value, name in self._env_secrets
                 if value in text}
        for value in (*_own_secrets(text), *_detect_secrets(text)):
            found.setdefault(value, SECRET)
        return found

    def _scrub(self, text: str, secrets: Mapping[str, str]) -> str:
        text = _mask(text, secrets)
        text = _EMAIL.sub("[EMAIL]", text)
        if self.addresses:
            text = _IPV4.sub("[IP]", text)
            text = _IPV6.sub("[IP]", text)
        text = self._paths(text)
        for name, mask in ((self.host, "[HOST]"), (self.user, "[USER]")):
            if name and len(name) >= 2 and name not in ("localhost", *SHARED_ACCOUNTS):
                text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", mask, text)
        return text

    def _paths(self, text: str) -> str:
        # only where the path starts: /mnt/root/x is not the home /root
        if self.project and self.project not in ("/", ""):
            text = re.sub(rf"(?<![\w./-]){re.escape(self.project.rstrip('/'))}/", "./", text)
        if self.home and self.home not in ("/", ""):
            text = re.sub(rf"(?<![\w./-]){re.escape(self.home.rstrip('/'))}(?![\w.-])", "~",
                          text)
        return _ABS_PATH.sub(_shorten_path, text)


def scrub_literals(source: str, scrub: Callable[[str], str]) -> str:
    """Return `source` (which parses) with `scrub` applied to each string literal and
    comment token; the result parses."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for token, new in _scrubbed_tokens(source, scrub):
        start = offsets[token.start[0] - 1] + token.start[1]
        end = offsets[token.end[0] - 1] + token.end[1]
        edits.append((start, end, new, _placeholder(token)))
    if not edits:
        return source
    scrubbed = _apply(source, [(s, e, new) for s, e, new, _ in edits])
    if _parses(scrubbed):
        return scrubbed
    return _apply(source, [(s, e, whole) for s, e, _, whole in edits])


def _scrubbed_tokens(source: str, scrub: Callable[[str], str]
                     ) -> Iterator[tuple[tokenize.TokenInfo, str]]:
    """The string, f-string part and comment tokens that scrubbing changes, with their new
    text (a literal that no longer parses gets its placeholder)."""
    kinds = {tokenize.STRING, tokenize.COMMENT, _FSTRING_MIDDLE} - {None}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in kinds:
            continue
        new = scrub(token.string)
        if new == token.string:
            continue
        if token.type == tokenize.STRING and not _parses(new, mode="eval"):
            new = _placeholder(token)
        elif token.type == tokenize.COMMENT and "\n" in new:
            new = _placeholder(token)
        yield token, new


def _placeholder(token: tokenize.TokenInfo) -> str:
    """The token with its whole content masked: same prefix and quotes for a literal."""
    if token.type == tokenize.COMMENT:
        return f"# {SECRET}"
    if token.type != tokenize.STRING:
        return SECRET  # an f-string's literal part
    text = token.string
    body = text.lstrip("rRbBuUfF")
    prefix = text[:len(text) - len(body)]
    quote = body[:3] if body[:3] in ('"""', "'''") else body[0]
    return f"{prefix}{quote}{SECRET}{quote}"


def _apply(source: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, reverse=True):
        source = source[:start] + new + source[end:]
    return source


def _parses(source: str, mode: str = "exec") -> bool:
    try:
        compile(source, "<cell>", mode, ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _mask(text: str, secrets: Mapping[str, str]) -> str:
    if not secrets:
        return text
    values = sorted(secrets, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, values)))
    return pattern.sub(lambda m: secrets[m.group(0)], text)


def _own_secrets(text: str) -> Iterator[str]:
    for pattern in _own_patterns():
        for match in pattern.finditer(text):
            yield match.group(1) if pattern.groups else match.group(0)
    for pattern in _wordlike_patterns():
        for match in pattern.finditer(text):
            quoted, value = match.group(1), match.group(2)
            if quoted or not _reads_as_word(value):
                yield value
    for block in _PRIVATE_KEY.finditer(text):
        yield from _KEY_BODY.findall(block.group(1))


@functools.cache
def _own_patterns() -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in OWN_SECRET_SHAPES)


@functools.cache
def _wordlike_patterns() -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in WORDLIKE_SECRET_SHAPES)


def _reads_as_word(value: str) -> bool:
    """True for a word or words joined by dots or hyphens, capitalised at most at their
    start: prose and names in code, not a token (which has digits, inner capitals or
    base64's `+/=`)."""
    return _WORD.fullmatch(value) is not None


def _detect_secrets(text: str) -> Iterator[str]:
    """The secret values detect-secrets' detectors find in `text`: the shapes over the
    whole text (none spans lines), keywords and quoted high-entropy strings line by line."""
    shapes, entropy, keyword_patterns, keyword_hint, filters = _detectors()
    for plugin in shapes:
        yield from filter(_worth_masking, map(_bare, plugin.analyze_string(text)))
    for line in text.splitlines():
        if "'" in line or '"' in line:
            for plugin in entropy:
                for value in plugin.analyze_string(line):
                    if (len(value) >= HIGH_ENTROPY_MIN_LENGTH
                            and plugin.calculate_shannon_entropy(value) > plugin.entropy_limit
                            and not filters.is_potential_uuid(value)
                            and not filters.is_sequential_string(value)):
                        yield value
        if not keyword_hint.search(line):
            continue  # the keyword patterns are costly; most lines name no secret
        for patterns, unquoted in keyword_patterns:
            for regex, group in patterns.items():  # every match: a dict has several keys
                for match in regex.finditer(line):
                    value = match.group(group)
                    if unquoted:  # `password: hunter22 (old)`, not `= get_password()`
                        value = _bare(value.split()[0] if value.split() else value)
                        if _INDIRECT.search(value):
                            continue
                    if _worth_masking(value) and not filters.is_templated_secret(value):
                        yield value


@functools.cache
def _detectors() -> tuple[Any, ...]:
    """detect-secrets' plugins, built once (the import costs ~0.2 s: only when scrubbing)."""
    import importlib

    from detect_secrets.filters import heuristic
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.high_entropy_strings import (
        Base64HighEntropyString,
        HexHighEntropyString,
    )

    shapes = tuple(getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)()
                   for module, name in DETECT_SECRETS_PLUGINS)
    # the keyword detector's patterns: quoted values (code), and unquoted ones (config, text)
    keyword_patterns = ((keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP, False),
                        (keyword.CONFIG_DENYLIST_REGEX_TO_GROUP, True))
    keyword_hint = re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)
    return (shapes, (Base64HighEntropyString(), HexHighEntropyString()), keyword_patterns,
            keyword_hint, heuristic)


def _bare(value: str) -> str:
    """A detector's match without the quotes or separators some patterns include."""
    return value.strip().strip("'\"`=:,;")


def _worth_masking(value: str) -> bool:
    return len(value) >= 4 and "REDACTED" not in value and value.lower() not in (
        NOT_SECRET_VALUES)


def _shorten_path(match: re.Match[str]) -> str:
    parts = [p for p in match.group(0).split("/") if p]
    return ".../" + "/".join(parts[-2:]) if len(parts) > 2 else match.group(0)


def _safe(read: Callable[[], str]) -> str:
    with contextlib.suppress(Exception):  # no user database in a container: nothing to mask
        return read()
    return ""


def masks_a_secret(text: str) -> bool:
    """Return True when `text` holds a masked secret (`[REDACTED]`, or `[REDACTED:NAME]`
    for an environment variable's value)."""
    return SECRET[:-1] in text


def redact(text: str) -> str:
    """Return `text` scrubbed for this machine (see Redactor)."""
    return Redactor()(text)


def without_addresses(redactor: Redactor) -> Redactor:
    """The same scrubbing with IP addresses kept (for version strings such as 9.1.0.70)."""
    return replace(redactor, addresses=False)
