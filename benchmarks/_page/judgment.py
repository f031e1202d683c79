"""The page's judgment part: how well and how fast the judges decide (accuracy.py, probes.py)."""

from __future__ import annotations

import json

from benchmarks._page import plots
from benchmarks._page.results import Commands, Figures, Headline, Run, fmt, latest, newest, of_kind

# How the page names each system of accuracy.py's results; the order of the headline and the table.
SYSTEMS = {
    "faithtrace": "faithtrace, embedded judge",
    "detector": "faithtrace, span detector",
    "deepeval": "DeepEval, same judge",
    "deepeval penalize_ambiguous_claims=True": "DeepEval penalize_ambiguous_claims, same judge",
    "ragas": "RAGAS, same judge",
    "length rule (>130 words)": "length rule (> 130 words, no judge)",
}
IN_HEADLINE = ("faithtrace", "detector", "deepeval", "ragas", "length rule (>130 words)")


def _systems(runs: list[Run]) -> dict[str, tuple[Run, str]]:
    """Each system's latest run over the same rows as the newest run: (run, system name)."""
    accuracy = of_kind(runs, "accuracy")
    last = newest(accuracy)
    if last is None:
        return {}
    same_rows = [r for r in accuracy if r.doc["row_ids"] == last.doc["row_ids"]]
    found = latest(
        (name, run, name) for run in sorted(same_rows, key=lambda r: r.date) for name in run.doc["systems"]
    )
    order = [*SYSTEMS, *sorted(set(found) - set(SYSTEMS))]
    return {str(k): found[k] for k in order if k in found}


def headlines(runs: list[Run]) -> list[Headline]:
    out = []
    systems = _systems(runs)
    for name, (run, key) in systems.items():
        if name not in IN_HEADLINE:
            continue
        f = Figures()
        s = ("systems", key)
        answer = f"balanced accuracy {f(run, *s, 'balanced_accuracy')}, AUROC {f(run, *s, 'auroc')}"
        if run.doc["systems"][key].get("llm_calls_per_eval"):
            answer += f", {f(run, *s, 'seconds_per_eval', digits=1)} s per evaluation"
        rows = len(run.doc["row_ids"])
        question = f"Accuracy on {rows} RAGTruth dev rows: {SYSTEMS.get(name, name)}"
        out.append(Headline(question, answer, tuple(f.cited), "accuracy"))
    probes = newest(of_kind(runs, "probes"))
    if probes is not None:
        f = Figures()
        sm = ("summary",)
        answer = (
            f"{f(probes, *sm, 'contradiction', 'all', 'caught')} of "
            f"{f(probes, *sm, 'contradiction', 'all', 'n')} "
            f"contradictions caught (held out: {f(probes, *sm, 'contradiction', 'heldout', 'caught')} of "
            f"{f(probes, *sm, 'contradiction', 'heldout', 'n')}), "
            f"{f(probes, *sm, 'faithful', 'all', 'caught')} of "
            f"{f(probes, *sm, 'faithful', 'all', 'n')} paraphrases passed (held out: "
            f"{f(probes, *sm, 'faithful', 'heldout', 'caught')} of "
            f"{f(probes, *sm, 'faithful', 'heldout', 'n')})"
        )
        out.append(Headline("Hand-written probes, embedded judge", answer, tuple(f.cited), "probes"))
    return out


def sections(runs: list[Run], images: dict[str, str]) -> list[tuple[str, list[Run]]]:
    out = []
    systems = _systems(runs)
    if systems:
        curves = [
            (SYSTEMS.get(name, name), run.doc["systems"][key]["per_row"])
            for name, (run, key) in systems.items()
            if "per_row" in run.doc["systems"][key]  # runs that kept no per-row figures draw no curve
        ]
        images["roc.svg"] = plots.roc(curves)
        shown = list(dict.fromkeys(run for run, _ in systems.values()))
        out.append((_accuracy(systems), shown))
    probes = newest(of_kind(runs, "probes"))
    if probes is not None:
        out.append((_probes(probes), [probes]))
    return out


def _accuracy(systems: dict[str, tuple[Run, str]]) -> str:
    cmds = Commands()
    first = next(iter(systems.values()))[0]
    lines = [
        "### Accuracy on the RAGTruth dev rows {#accuracy}\n",
        f"Each system scores the same {len(first.doc['row_ids'])} labelled RAGTruth QA answers "
        "(half faithful, half hallucinated) with the same judge model; balanced accuracy at the system's own "
        "pass threshold, AUROC of its score against the labels. An evaluation that ends without a score is "
        "invalid and counts as faithful. Each row is the system's latest run; seconds per evaluation come "
        "from "
        "a shared 2-core CPU under the load of the day, so compare them within a run.\n",
        "| system | judge | bal. acc. | AUROC | invalid | calls/eval | in tok/eval | out tok/eval | s/eval "
        "| run |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, (run, key) in systems.items():
        s = run.doc["systems"][key]
        judge = run.doc["judge"] if s.get("llm_calls_per_eval") else "none"
        lines.append(
            f"| {SYSTEMS.get(name, name)} | {judge} | {fmt(s['balanced_accuracy'])} | {fmt(s['auroc'])} | "
            f"{fmt(s['invalid_rate'])} | {fmt(s['llm_calls_per_eval'], 1)} | "
            f"{fmt(s['input_tokens_per_eval'], 0)} | "
            f"{fmt(s['output_tokens_per_eval'], 0)} | {fmt(s['seconds_per_eval'], 1)} | {cmds.ref(run)} |"
        )
    notes = [
        f"- {k}: {v}"
        for run in cmds.runs
        for k, v in run.doc.get("notes", {}).items()
        if _about(k, run, systems)
    ]
    lines += ["", *notes, "", "![ROC curves on the dev rows](images/benchmarks/roc.svg)", "", cmds.markdown()]
    return "\n".join(lines)


def _about(note: str, run: Run, systems: dict[str, tuple[Run, str]]) -> bool:
    """Whether a run's note is about rows this table shows from that run: a paired bootstrap between two
    systems (``"a − b, 95 % paired bootstrap"``) or a note on one system, keyed by its name."""
    named = note.split(", 95 % paired bootstrap")[0].split(" − ") if "bootstrap" in note else [note]
    return all(n in systems and systems[n][0] is run for n in named)


def _probes(run: Run) -> str:
    from benchmarks.judgment import (
        probes as script,  # the script's own table: the page and `--table-only` agree
    )

    rows_file = run.path.with_name(run.doc["rows_file"])
    rows = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    cmds = Commands()
    cmds.ref(run)
    notes = [f"- {k}: {v}" for k, v in run.doc.get("notes", {}).items()]
    return "\n".join(
        [
            "### Probes {#probes}\n",
            "Hand-written answers with a known false sentence (a swapped day, number or name, a negation, "
            "the "
            "opposite of another sentence, ...) and faithful paraphrases of the same documents. A "
            "contradiction "
            "is caught when it scores below 1.0 and fails; a paraphrase when it passes. Every third probe "
            "was held "
            "out of all tuning.\n",
            script.table(rows),
            "",
            *notes,
            "",
            cmds.markdown(),
        ]
    )
