"""The recipe's synthetic answers (training/synth.py): contradictions labelled on exactly the changed words,
rewordings labelled faithful, all built from the row's own passages, reproducible from a seed."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from faithtrace.judge.detector.inputs import context_segment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training import synth  # noqa: E402
from training.prep import Example  # noqa: E402

PASSAGES = [
    "The Golden Gate Bridge opened in May 1937 after four years of construction. It is 2,737 meters long and "
    "carries 6 lanes of traffic. The bridge was designed by Joseph Strauss and painted by Irving Morrow.",
    "Its main span was the longest in the world until 1964. The bridge is not owned by the state of "
    "California. Fog is more common in summer than in winter, and the toll is usually collected from "
    "drivers.",
    "In 1989 the Loma Prieta earthquake did not damage the bridge. Engineers from Caltrans inspect it each "
    "Monday, and Sarah Chen leads the team with Daniel Ortiz.",
]


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"row{i}",
            "source_id": f"s{i % 7}",
            "question": "Tell me about the bridge.",
            "contexts": PASSAGES,
        }
        for i in range(n)
    ]


def _changed_sentences(example: Example) -> list[str]:
    """The answer's sentences that are not copied verbatim from the passages."""
    return [s for s in re.split(r"(?<=[.!?]) ", example.answer) if s not in example.context]


def test_generation_is_reproducible_from_the_seed() -> None:
    rows = _rows(40)
    first = synth.generate(rows, ratio=1.0, seed=5)
    assert first == synth.generate(rows, ratio=1.0, seed=5)
    assert first != synth.generate(rows, ratio=1.0, seed=6)


def test_every_kind_is_made_in_turn_up_to_the_ratio() -> None:
    rows = _rows(40)
    examples = synth.generate(rows, ratio=0.5, seed=1)
    assert len(examples) == 20
    kinds = Counter(e.origin.removeprefix("synthetic:") for e in examples)
    assert set(kinds) == set(synth.KINDS)
    assert kinds["faithful"] == 2 * min(kinds[k] for k in synth.CONTRADICTIONS)
    assert len({e.id for e in examples}) == len(examples)


def test_a_contradiction_changes_one_sentence_and_labels_only_the_changed_words() -> None:
    examples = synth.generate(_rows(60), ratio=2.0, seed=2)
    contradictions = [e for e in examples if e.origin != "synthetic:faithful"]
    assert len(contradictions) >= 60
    for e in contradictions:
        assert e.context == context_segment("Tell me about the bridge.", PASSAGES)
        (changed,) = _changed_sentences(e)
        assert e.spans, e
        for start, end in e.spans:
            text = e.answer[start:end]
            assert text, e.origin
            assert text == text.strip(), (e.origin, text)
            # The labelled words sit inside the changed sentence.
            assert e.answer.index(changed) <= start
            assert end <= e.answer.index(changed) + len(changed)
        # Putting back what the passages say at the labelled places restores a passage sentence: nothing
        # outside the spans was touched.
        kind = e.origin.removeprefix("synthetic:")
        pieces = [e.answer[s:t] for s, t in e.spans]
        if kind == "number":
            assert all(re.fullmatch(r"[\d,.]+", p) for p in pieces), pieces
        elif kind == "date":
            assert all(re.fullmatch(r"\d{4}|[A-Z][a-z]+day|[A-Z][a-z]+", p) for p in pieces), pieces
        elif kind == "negation":
            assert all(p.endswith(" not") or p in {"is", "did", "can"} for p in pieces), pieces
        elif kind == "role_swap":
            assert len(pieces) == 2
            assert pieces[0] != pieces[1]
            # Each swapped name is one the original sentence held.
            assert all(p in e.context for p in pieces)
        elif kind == "name":
            # The new name is a real one from elsewhere in the passages, wrong in this sentence.
            assert pieces[0] in e.context
        elif kind == "comparative":
            assert pieces[0].lower() in {
                "less",
                "more",
                "shortest",
                "longer",
                "shorter",
                "rare",
                "after",
                "before",
                "least",
                "most",
                "later",
                "earlier",
                "smaller",
                "larger",
                "lower",
                "higher",
                "first",
                "last",
                "under",
                "over",
            }, pieces


def test_a_role_swap_exchanges_two_names_in_place() -> None:
    swaps = [e for e in synth.generate(_rows(80), ratio=2.0, seed=3) if e.origin == "synthetic:role_swap"]
    assert swaps
    for e in swaps:
        (changed,) = _changed_sentences(e)
        (a_start, a_end), (b_start, b_end) = e.spans
        a, b = e.answer[a_start:a_end], e.answer[b_start:b_end]
        restored = e.answer[:a_start] + b + e.answer[a_end:b_start] + a + e.answer[b_end:]
        assert changed not in restored
        assert all(s in e.context for s in re.split(r"(?<=[.!?]) ", restored))


def test_names_in_a_list_are_not_swapped_since_their_order_means_nothing() -> None:
    listed = "Pickles spread quickly through Asia, Greece and Egypt in the ancient world."
    related = "In the final, Brazil defeated Germany by two goals to one."
    rows = [
        {"id": f"r{i}", "source_id": "s", "question": "q?", "contexts": [listed, related if i else listed]}
        for i in range(20)
    ]
    swaps = [e for e in synth.generate(rows, ratio=3.0, seed=0) if e.origin == "synthetic:role_swap"]
    assert swaps
    for e in swaps:
        assert {e.answer[s:t] for s, t in e.spans} == {"Brazil", "Germany"}


def test_a_faithful_rewording_changes_only_the_form_and_is_labelled_faithful() -> None:
    faithful = [e for e in synth.generate(_rows(60), ratio=2.0, seed=4) if e.origin == "synthetic:faithful"]
    assert len(faithful) >= 20
    for e in faithful:
        assert e.spans == ()
        assert not e.hallucinated
        (changed,) = _changed_sentences(e)
        # Undo the known rewordings: what is left must be a passage sentence word for word.
        undone = changed
        for lead in ("According to the passages, ", "Based on the context, ", "The passages say that "):
            if undone.startswith(lead):
                undone = undone[len(lead)].upper() + undone[len(lead) + 1 :]
        words = set(re.findall(r"[\w']+", undone.lower())) - set(re.findall(r"[\w']+", e.context.lower()))
        allowed = {
            "four",
            "six",
            "about",
            "typically",
            "often",
            "isn't",
            "didn't",
            "than",
            "five",
            "but",
            "so",
            "as",
            "well",
            "big",
            "situated",
            "fast",
            "need",
            "whole",
            "get",
            "help",
            "start",
            "buy",
            "usually",
            "1",
            "2",
            "3",
            "4",
            "5",
            "6",
            "7",
            "8",
            "9",
            "10",
            "one",
            "two",
            "three",
            "wasn't",
        }
        assert words <= allowed, (changed, words)


def test_rows_without_usable_sentences_give_nothing_rather_than_a_broken_example() -> None:
    rows = [{"id": "x", "source_id": "s", "question": "q", "contexts": ["Too short.", "Also short."]}]
    assert synth.generate(rows, ratio=3.0, seed=0) == []
