"""A small labelled dataset for ``faithtrace eval --report`` and the scripted judge replies that score it.

Answers are made of sentences copied from the document (proven supported in code: the judge is not asked) and
invented ones, which the fake judge calls "idk" (or "no" for one saying "never"). So each row's score is known
in advance: supported sentences / all sentences. The labels include a false alarm (labelled faithful, fails),
a miss (labelled hallucinated, passes), an answer failed for a contradiction above the pass mark, an answer
carrying markup that must stay text, and three bad lines (invalid JSON, no answer, an unknown label).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _scoring_fixtures import FakeJudge, verdicts_json

DOCUMENT = (
    "The Voltaro City has a range of 80 km. Its battery charges in 4 hours. The frame carries a 5-year "
    "warranty. Orders ship from Leipzig."
)
T1, T2, T3, T4 = (s if s.endswith(".") else s + "." for s in DOCUMENT.split(". "))
WEIGHT = "The Voltaro City weighs 19 kg."
HELMET = "Every bike comes with a free helmet."
NEVER = "The battery is never covered by the warranty."
# Markup in an answer: shown as text, never run or loaded.
INJECTED = (
    '<script>window.__pwned = 1</script><img src="http://127.0.0.1:9/x.png" onerror="window.__pwned = 2">'
)
INJECTED_SENTENCE = f"It folds flat {INJECTED} in seconds."

# id -> (sentences, label)
ROWS: dict[str, tuple[list[str], str | None]] = {
    "f-all-three": ([T1, T2, T3], "faithful"),
    "f-two": ([T2, T4], "faithful"),
    "f-one": ([T1], "faithful"),
    "f-mostly": ([T1, T2, T3, WEIGHT], "faithful"),  # 0.75: passes
    "false-alarm": ([T1, HELMET], "faithful"),  # 0.5: fails, labelled faithful
    "h-none": ([WEIGHT], "hallucinated"),  # 0.0
    "h-third": ([T1, WEIGHT, HELMET], "hallucinated"),  # 0.333
    "h-contradicted": ([T3, NEVER], "hallucinated"),  # 0.5
    "h-two-thirds": ([T1, T2, HELMET], "hallucinated"),  # 0.667
    "miss": ([T1, T2, T3, T4, WEIGHT], "hallucinated"),  # 0.8: passes, labelled hallucinated
    "h-contradiction-above": ([T1, T2, T3, T4, NEVER], "hallucinated"),  # 0.8, failed for the contradiction
    "h-injected": ([T1, INJECTED_SENTENCE], "hallucinated"),  # 0.5
    "unlabelled": ([T1, T2], None),
}
INVENTED = {WEIGHT, HELMET, NEVER, INJECTED_SENTENCE}
SCORES = {
    row_id: sum(s not in INVENTED for s in sentences) / len(sentences)
    for row_id, (sentences, _) in ROWS.items()
}
# The bad lines, by line number in the file write_dataset writes.
BAD_LINES = {
    3: "invalid JSON",
    7: "missing field(s) answer",
    10: "'label' must be one of",
}


def write_dataset(path: Path) -> Path:
    lines: list[str] = []
    rows = iter(ROWS.items())
    while len(lines) < len(ROWS) + len(BAD_LINES):
        number = len(lines) + 1
        if number == 3:
            lines.append('{"id": "torn", "question": "How far')
        elif number == 7:
            lines.append(json.dumps({"id": "no-answer", "question": "q", "contexts": [DOCUMENT]}))
        elif number == 10:
            lines.append(
                json.dumps(
                    {"id": "odd", "question": "q", "contexts": [DOCUMENT], "answer": T1, "label": "maybe"}
                )
            )
        else:
            row_id, (sentences, label) = next(rows)
            row: dict[str, Any] = {
                "id": row_id,
                "question": "Tell me about the Voltaro City.",
                "contexts": [DOCUMENT],
                "answer": " ".join(sentences),
            }
            if label is not None:
                row["label"] = label
            lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _verdicts(body: dict[str, Any]) -> str:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    block = prompt.split("<claims>\n")[1].split("\n</claims>")[0]
    claims = [line for line in block.splitlines() if line[:1].isdigit()]
    invented = ("weighs", "helmet", "folds flat")
    return verdicts_json(
        *("no" if "never" in c else "idk" if any(w in c for w in invented) else "yes" for c in claims)
    )


def script_judge(fake_judge: FakeJudge) -> FakeJudge:
    """Invented sentences: "idk", or "no" for the one saying "never"."""
    fake_judge.on("verdicts", _verdicts)
    fake_judge.on("reason", json.dumps({"reason": "scripted reason"}))
    return fake_judge
