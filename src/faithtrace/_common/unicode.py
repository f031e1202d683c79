"""Text that can be encoded: what the judge's HTTP request and the OTLP exporter need, whatever the host gave.

A Python ``str`` may hold lone surrogates ("\\ud800", from a bad ``surrogateescape`` decode, a JSON
``"\\ud800"`` escape or a cut emoji): UTF-8 cannot encode them, so the judge's request and the span's
protobuf would fail on one bad character. They are replaced by U+FFFD, the replacement character, and
counted; a surrogate pair written as two code points is joined into the character it stands for.
"""

from __future__ import annotations


def valid_text(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text, 0  # the usual case: one pass in C, no copy
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, fixed.count("\ufffd") - text.count("\ufffd")
