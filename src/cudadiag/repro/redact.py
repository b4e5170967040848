"""Scrub text before it leaves the machine (a report, an exported notebook): guide point 12,
a precise request with personal data and needless paths removed.

The home directory becomes `~`; the user and host names never appear; e-mail addresses, IP
addresses and tokens (Hugging Face `hf_`, OpenAI-style `sk-`, GitHub `ghp_`/`gho_`/...,
AWS access key ids, bearer tokens) are masked; absolute paths outside the project are
shortened to their last two parts.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_TOKENS = (
    (re.compile(r"\bhf_[A-Za-z0-9]{10,}\b"), "hf_[REDACTED]"),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}\b"), "sk-[REDACTED]"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"), "gh_[REDACTED]"),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"), "github_pat_[REDACTED]"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "[AWS-KEY-REDACTED]"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*"), r"\1 [REDACTED]"),
    (re.compile(r"(?i)\b((?:api[_-]?key|token|secret|password|passwd)\s*[=:]\s*)"
                r"['\"]?[^\s'\"]{6,}['\"]?"), r"\1[REDACTED]"),
)
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b")
_IPV4 = re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b")
_IPV6 = re.compile(
    r"(?<![\w:])(?:(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}"
    r"|(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4})*)?)(?![\w:])"
)
_ABS_PATH = re.compile(r"(?<![\w.~:/])/(?:[\w.\-]+/)+[\w.\-]*")
"""An absolute path; not the path part of a URL (`https://host/a/b`)."""


@dataclass
class Redactor:
    """Scrubs text for this machine: its home, user and host names, the project root."""

    home: str = field(default_factory=lambda: str(Path.home()))
    user: str = field(default_factory=lambda: _safe(getpass.getuser))
    host: str = field(default_factory=lambda: _safe(socket.gethostname))
    project: str | None = field(default_factory=os.getcwd)
    addresses: bool = True
    """Mask IP addresses (off for version strings such as cuDNN's 9.1.0.70)."""

    def __call__(self, text: str) -> str:
        """Return `text` scrubbed; never raises."""
        if not text:
            return text
        for pattern, replacement in _TOKENS:
            text = pattern.sub(replacement, text)
        text = _EMAIL.sub("[EMAIL]", text)
        if self.addresses:
            text = _IPV4.sub("[IP]", text)
            text = _IPV6.sub("[IP]", text)
        text = self._paths(text)
        for name, mask in ((self.host, "[HOST]"), (self.user, "[USER]")):
            if name and len(name) >= 2 and name != "localhost":
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


def _shorten_path(match: re.Match[str]) -> str:
    parts = [p for p in match.group(0).split("/") if p]
    return ".../" + "/".join(parts[-2:]) if len(parts) > 2 else match.group(0)


def _safe(read: Callable[[], str]) -> str:
    try:
        return read()
    except Exception:  # no user database in a container: nothing to redact then
        return ""


def redact(text: str) -> str:
    """Return `text` scrubbed for this machine (see Redactor)."""
    return Redactor()(text)
