"""Claim-level agreement with RAGTruth's labelled spans: does P(supported) tell false sentences from true?

RAGTruth labels the hallucinated *spans* of an answer, not just the answer. A claim (one sentence of the
answer, as faithtrace splits it) counts as false when it shares text with a labelled span: the span inside
the claim, the claim inside the span, or four words in a row in common. For faithtrace's rows in an
``accuracy.py`` per-row file, this prints, per who decided the claim, how many claims there were, how many
are false, and the AUROC of 1 - P(supported) against that label (P(supported): 1 for a proven claim, the
judge's P(yes) where recorded, else 1/0 by verdict), plus the same for the lexical check's share of unknown
words, computed here from the texts. Then, per row, the score re-decided under ``verdict_policy="strict"``
from the stored verdicts (exact: the policy is applied in code after the judge answered, and the judge is not
asked again) next to the score as run and the length rule: balanced accuracy at the 0.7 threshold, AUROC.

    python benchmarks/judgment/claim_level.py benchmarks/results/accuracy_rows.jsonl \\
        --data ../shared/data/ragtruth_qa_dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import metrics


def _plain(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def is_false(claim: str, spans: list[dict[str, Any]]) -> bool:
    words = _plain(claim).split()
    grams = {" ".join(words[i : i + 4]) for i in range(max(1, len(words) - 3))}
    for span in spans:
        labelled = _plain(span.get("text", ""))
        if not labelled:
            continue
        if labelled in _plain(claim) or _plain(claim) in labelled:
            return True
        sw = labelled.split()
        if len(sw) >= 4 and any(" ".join(sw[i : i + 4]) in grams for i in range(len(sw) - 3)):
            return True
    return False


def _check(claim: str, g: Any) -> str:
    from faithtrace.scoring import contradictions, verdict_checks

    return verdict_checks.check_verdict(g, contradictions.find(claim, g.near))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rows", type=Path, help="an accuracy.py per-row file (*_rows.jsonl)")
    p.add_argument("--data", type=Path, required=True, help="the RAGTruth JSONL the rows were scored from")
    args = p.parse_args(argv)

    from faithtrace.scoring import grounding

    data = {
        r["id"]: r for r in map(json.loads, args.data.read_text().splitlines()) if r.get("spans") is not None
    }
    rows_hallucinated: list[bool] = []
    scores: dict[str, list[float]] = {"as run": [], "strict": [], "words (length rule)": []}
    labels: list[bool] = []
    support: list[float] = []
    lexical: list[float] = []
    by: dict[str, list[int]] = {}
    for line in args.rows.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("system") != "faithtrace" or rec["id"] not in data or not rec.get("claims"):
            continue
        row = data[rec["id"]]
        texts = [c[0] for c in rec["claims"]]
        found = grounding.check_claims(texts, row["contexts"], row["question"])
        strict = [
            c[1] == "yes" and (c[3] == "proof" or _check(c[0], g) == "yes")
            for c, g in zip(rec["claims"], found, strict=True)
        ]
        rows_hallucinated.append(row["label"] == "hallucinated")
        scores["as run"].append(float(rec["score"]))
        scores["strict"].append(sum(strict) / len(strict))
        scores["words (length rule)"].append(-float(len(row["answer"].split())))
        for (text, verdict, _reason, decided_by, p_yes), g in zip(rec["claims"], found, strict=True):
            false = is_false(text, row["spans"])
            count = by.setdefault(decided_by, [0, 0])
            count[0] += 1
            count[1] += false
            if decided_by == "proof":
                continue
            labels.append(false)
            support.append(p_yes if p_yes is not None else float(verdict == "yes"))
            lexical.append(g.missing_share + (1.0 if g.numbers_missing else 0.0))
    print(f"claims by who decided them (n, labelled false): {by}")
    print(f"judged claims: {len(labels)}, labelled false: {sum(labels)}")
    auc = metrics.auroc(labels, [1.0 - s for s in support])
    lex = metrics.auroc(labels, lexical)
    print(f"claim-level AUROC of 1 - P(supported): {auc if auc is None else round(auc, 3)}")
    shown = lex if lex is None else round(lex, 3)
    print(f"claim-level AUROC of the lexical check's unknown-word share: {shown}")
    for name, values in scores.items():
        predicted = [-v > 130 for v in values] if name.startswith("words") else [v < 0.7 for v in values]
        ba = metrics.balanced_accuracy(rows_hallucinated, predicted)
        auc = metrics.auroc(rows_hallucinated, [-v for v in values])
        mean = sum(values) / len(values) if values else None
        print(f"rows {len(values)}, {name}: balanced accuracy {ba}, AUROC {auc}, mean {mean}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
