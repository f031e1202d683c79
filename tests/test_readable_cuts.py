"""Texts people read in trace UIs (explanations, quoted claims and reasons) are cut between words or at a
sentence end, with an ellipsis, within their cap: never "…'everywhere' in th…)"."""

from __future__ import annotations

import re

import pytest

from faithtrace._common.secrets import export_text
from faithtrace._common.shorten import ELLIPSIS, shorten
from faithtrace.scoring import reasons
from faithtrace.scoring.models import ClaimVerdict, VerdictCounts

# What the embedded judge wrote about the demo's added fact, and a paragraph of several sentences.
JUDGE_REASON = (
    "The documents say nothing about express next-day delivery, and the word 'everywhere' in the claim is "
    "not supported by the text, which only mentions standard shipping within the EU."
)
PARAGRAPH = (
    "Frames have a five-year warranty. Batteries are covered for two years. Cancellation is possible at any "
    "time, and refunds are paid within fourteen days of the request."
)


def _cut_between_words(original: str, shown: str) -> bool:
    """``shown`` is a start of ``original`` that ends where a word ends, then the ellipsis."""
    assert shown.endswith(ELLIPSIS), shown
    head = shown[: -len(ELLIPSIS)].rstrip()
    return original.startswith(head) and (len(head) == len(original) or not original[len(head)].isalnum())


@pytest.mark.parametrize("limit", range(20, len(JUDGE_REASON) + 1, 7))
@pytest.mark.parametrize("text", [JUDGE_REASON, PARAGRAPH])
def test_a_cut_keeps_whole_words_within_the_cap(text: str, limit: int) -> None:
    shown = shorten(text, limit)
    if len(text) <= limit:
        assert shown == text
        return
    assert len(shown) <= limit
    assert _cut_between_words(text, shown)
    # Backing up loses little: to a sentence end that keeps 60% of the room, else one word (12 letters here).
    assert len(shown) >= min(0.6 * (limit - 2), limit - 14)


def test_a_cut_prefers_a_sentence_end_that_keeps_most_of_the_text() -> None:
    shown = shorten(PARAGRAPH, 80)
    assert shown == "Frames have a five-year warranty. Batteries are covered for two years. " + ELLIPSIS
    # No dangling punctuation before the ellipsis.
    assert shorten("one two, three four", 11) == "one two" + ELLIPSIS


def test_one_long_token_is_cut_at_the_cap_rather_than_lost() -> None:
    url = "https://example.com/" + "a" * 200
    shown = shorten(url, 50)
    assert len(shown) == 50
    assert shown.startswith("https://example.com/aaa")
    assert shown.endswith(ELLIPSIS)
    assert shorten("abc", 1) == ELLIPSIS
    assert shorten("abc", 0) == ""


def test_the_reason_quotes_a_long_judge_reason_between_words() -> None:
    claim = ClaimVerdict(
        text="Express next-day delivery is available everywhere in the EU for 15 euros.",
        verdict="idk",
        reason=JUDGE_REASON,
    )
    reason = reasons.scored_reason(VerdictCounts(yes=2, idk=1), [claim])
    quoted = re.search(r"; (.*)\)\.$", reason)
    assert quoted, reason
    assert _cut_between_words(JUDGE_REASON, quoted.group(1)), reason
    assert "in th" + ELLIPSIS not in reason


def test_readable_exports_are_cut_between_words_after_scrubbing() -> None:
    secret = "sk-" + "Z9y8X7w6" * 4
    text = f"The api_key={secret} leaked, and {JUDGE_REASON}"
    shown, cut = export_text(text, 90, True, None, readable=True)
    assert cut
    assert len(shown) <= 90
    assert secret not in shown
    scrubbed = text.replace(secret, "[REDACTED]")
    assert _cut_between_words(scrubbed, shown), shown
    # Other exported texts keep the exact cut at the cap (values, ids, JSON parts).
    raw, _ = export_text(JUDGE_REASON, 90, True, None)
    assert raw == JUDGE_REASON[:90]
