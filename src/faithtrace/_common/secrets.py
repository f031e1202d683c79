"""Secret scrubbing and the last step before any captured text leaves the process.

Exported texts (the RAG span's attributes, the evaluation span's claims and reasons, the host's exception
messages) often quote connection strings and keys. Everything that leaves goes through ``export_text``: cut to
its cap, secrets scrubbed, then the user's ``redact`` hook. The judge still sees the raw text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from faithtrace._common import safety
from faithtrace._common.shorten import shorten
from faithtrace._common.unicode import valid_text

_SECRET_RE: Final = re.compile(
    r"(?P<kv>\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret)"
    r"\b[\"']?\s*(?:[:=]|\bis\b)\s*)(?:\"[^\"]*\"|'[^']*'|[^\s,;]+)"
    r"|\bsk-[A-Za-z0-9_\-]{16,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|\bAIza[0-9A-Za-z_\-]{35}"
    r"|\b[Bb]earer\s+[A-Za-z0-9._~+/\-]{12,}=*"
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    re.IGNORECASE,
)
REDACTED: Final = "[REDACTED]"
# What is exported in place of a text when the app's redact hook raised: the text itself must not leave.
WITHHELD: Final = "[REDACTION FAILED]"


def _replace_secret(match: re.Match[str]) -> str:
    kv = match.group("kv")
    return kv + REDACTED if kv else REDACTED


# Every pattern above contains one of these (lower-cased): most texts hold none, and a few substring searches
# cost far less than running the full pattern over the text on the request path.
_SECRET_HINTS: Final = (
    "sk-", "akia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "xox", "aiza", "bearer", "eyj", "private key",
    "passw", "pwd", "secret", "apikey", "api_key", "api-key", "token",
)  # fmt: skip


def scrub_secrets(text: str) -> str:
    lowered = text.lower()
    for hint in _SECRET_HINTS:
        if hint in lowered:
            return _SECRET_RE.sub(_replace_secret, text)
    return text


def _redacted(redact: Callable[[str], str], text: str) -> str:
    """The app's ``redact`` hook on ``text``. What the hook raises is the app's error (recorded): the text is
    withheld rather than exported unredacted."""
    try:
        out = redact(text)
        if type(out) is not str:
            out = str(out) if not isinstance(out, str) else str.__getitem__(out, slice(None))
        return out
    except Exception as exc:
        safety.host_error("redact", "the capture.redact hook", exc, "the text it was given is not exported")
        return WITHHELD


def export_text(
    text: str,
    max_chars: int,
    scrub: bool,
    redact: Callable[[str], str] | None,
    *,
    readable: bool = False,
) -> tuple[str, bool]:
    """``text`` as it may leave the process: cut to ``max_chars``, secrets scrubbed, then the user's hook.

    ``readable`` texts (explanations, reasons: read by people in trace UIs) are cut at a sentence end or
    between words and end in an ellipsis; others at the cap exactly. Returns the text and whether it was cut.
    """
    # Scrub a little past the cap so that a secret straddling it cannot leave its first half behind.
    cut = len(text) > max_chars
    if cut:
        text = text[: max_chars + 128]
    if scrub:
        text = scrub_secrets(text)
    if cut and readable:
        # At least one character goes, so that the ellipsis is there even when scrubbing shortened the text.
        text = shorten(text, min(max_chars, len(text) - 1))
    elif cut:
        text = text[:max_chars]
    if redact is not None:
        text = _redacted(redact, text)
    # One lone surrogate would make the exporter's encoding fail, and with it the whole batch of spans.
    return valid_text(text)[0], cut
