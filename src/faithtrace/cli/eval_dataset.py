"""``faithtrace eval FILE.jsonl``: score a dataset, append results as they finish, resume, summarise."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from faithtrace._common.unicode import valid_text
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace.cli.deliver import Deliver, deliver_results, read_lines
from faithtrace.cli.figures import Skip, Source
from faithtrace.cli.metrics import LABELS
from faithtrace.cli.output import Output
from faithtrace.judge import Judge
from faithtrace.scoring.models import FaithfulnessResult
from faithtrace.scoring.pipeline import run_pipeline


@dataclass(frozen=True)
class Row:
    line: int
    id: str
    question: str | None
    contexts: list[str]
    answer: str
    label: str | None


def parse_row(line_no: int, text: str) -> Row | Skip:
    """A row, or the line and what is wrong with it."""

    def skip(reason: str) -> Skip:
        return Skip(line_no, reason)

    try:
        data = json.loads(text)
    except ValueError as exc:
        return skip(f"invalid JSON ({exc})")
    if not isinstance(data, dict):
        return skip(f"expected a JSON object, got {type(data).__name__}")
    missing = [k for k in ("question", "contexts", "answer") if k not in data]
    if missing:
        return skip(f"missing field(s) {', '.join(missing)}")
    question, contexts, answer = data["question"], data["contexts"], data["answer"]
    if question is not None and not isinstance(question, str):
        return skip("'question' must be a string")
    if isinstance(contexts, str):
        contexts = [contexts]
    if not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
        return skip("'contexts' must be a string or a list of strings")
    if not isinstance(answer, str):
        return skip("'answer' must be a string")
    label = data.get("label")
    if label is not None and label not in LABELS:
        return skip(f"'label' must be one of {', '.join(LABELS)} (got {label!r})")
    row_id = data.get("id")
    if row_id is None:
        row_id = f"line-{line_no}"
    elif not isinstance(row_id, str | int):
        return skip("'id' must be a string or a number")
    # The id is written back as it is: a lone surrogate ("\ud800" in the JSON) could not be (the texts are
    # cleaned by the pipeline).
    return Row(line_no, valid_text(str(row_id))[0], question, contexts, answer, label)


def load_rows(path: Path) -> tuple[list[Row], list[Skip]]:
    """Valid rows and one skip per bad line. Raises OSError when the file cannot be read."""
    rows: list[Row] = []
    skips: list[Skip] = []
    first_line: dict[str, int] = {}
    with path.open(encoding="utf-8", errors="replace") as f:
        for line_no, text in enumerate(f, start=1):
            if not text.strip():
                continue
            got = parse_row(line_no, text)
            if isinstance(got, Skip):
                skips.append(got)
            elif got.id in first_line:
                skips.append(Skip(line_no, f"duplicate id {got.id!r} (first on line {first_line[got.id]})"))
            else:
                first_line[got.id] = line_no
                rows.append(got)
    return rows, skips


def load_done(path: Path) -> dict[str, dict[str, Any]]:
    """The last record per id already in an output file (a partial line from a crash is ignored)."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    with path.open(encoding="utf-8", errors="replace") as f:
        for text in f:
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if isinstance(record, dict) and "id" in record:
                done[str(record["id"])] = record
    return done


# The judge's settings a reader of the results needs; never its address, key or extra parameters (they may
# carry credentials).
_JUDGE_FIELDS = ("temperature", "max_tokens", "structured_output", "timeout_s", "max_retries")


def judge_of(judge: Judge) -> dict[str, Any]:
    settings = judge.settings.model_dump(mode="json", include=set(_JUDGE_FIELDS))
    return {"model": judge.model_name, **{k: settings[k] for k in _JUDGE_FIELDS}}


def record_of(
    row: Row, result: FaithfulnessResult, options: ScoringOptions, judge: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One line of the output file: the row's texts, its result and the settings it was scored with, so that
    the file alone is enough for ``faithtrace report``."""
    return {
        "id": row.id,
        "line": row.line,
        "label": row.label,
        **result.model_dump(mode="json"),
        "usage": {
            "llm_calls": result.llm_calls,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            "cost_usd": result.cost_usd,
        },
        "question": row.question,
        "contexts": row.contexts,
        "answer": row.answer,
        "options": options.model_dump(mode="json"),
        "judge": dict(judge) if judge is not None else None,
    }


async def score_rows(
    rows: Sequence[Row],
    *,
    judge: Judge,
    options: ScoringOptions,
    concurrency: int,
    sink: IO[str] | None,
    on_done: Callable[[Row, dict[str, Any]], None],
) -> list[dict[str, Any]]:
    """Score rows, ``concurrency`` at once; each record is written and flushed as soon as it is done."""
    gate = asyncio.Semaphore(concurrency)
    records: list[dict[str, Any]] = []

    async def one(row: Row) -> None:
        async with gate:
            result = await run_pipeline(row.question, row.contexts, row.answer, judge=judge, options=options)
        record = record_of(row, result, options, judge_of(judge))
        records.append(record)
        if sink is not None:
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()  # an interrupted run keeps every finished row
        on_done(row, record)

    tasks = [asyncio.ensure_future(one(row)) for row in rows]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return records


def run_eval_command(
    out: Output,
    file: Path,
    out_path: Path | None,
    *,
    judge: Judge,
    options: ScoringOptions,
    concurrency: int,
    limit: int | None,
    deliver: Deliver,
) -> int:
    loaded = read_lines(out, "eval", file, load_rows)
    if loaded is None:
        return 2
    rows, skips = loaded
    if not rows:
        out.error(f"faithtrace eval: {file} has no row to score")
        return 2
    if limit is not None:
        rows = rows[:limit]
    done = load_done(out_path) if out_path is not None else {}
    todo = [r for r in rows if done.get(r.id, {}).get("outcome") in (None, "error")]
    if len(todo) < len(rows):
        out.line(f"resuming: {len(rows) - len(todo)} of {len(rows)} rows already scored in {out_path}")

    def on_done(row: Row, record: dict[str, Any]) -> None:
        score = record.get("score")
        note = f"{row.id}: {record['outcome']}" + (f" {score:.2f}" if score is not None else "")
        progress.advance(note)

    sink = out_path.open("a", encoding="utf-8") if out_path is not None else None
    interrupted = False
    try:
        with out.progress(len(todo), "scoring") as progress:
            try:
                new = asyncio.run(
                    score_rows(
                        todo,
                        judge=judge,
                        options=options,
                        concurrency=concurrency,
                        sink=sink,
                        on_done=on_done,
                    )
                )
            except KeyboardInterrupt:
                interrupted, new = True, []
    finally:
        if sink is not None:
            sink.close()
    if interrupted:
        where = f"; rerun with --out {out_path} to resume" if out_path else ""
        out.error(f"faithtrace eval: interrupted after {progress.done} of {len(todo)} rows{where}")
        if out_path is None:
            return 130
    latest = load_done(out_path) if out_path is not None else {r["id"]: r for r in new}
    records = [latest[r.id] for r in rows if r.id in latest]
    source = Source(str(file), len(rows), skips, not_scored=len(rows) - len(records))
    code = deliver_results(out, records, source, options.threshold, deliver, command="eval")
    if skips:
        out.error(f"faithtrace eval: {len(skips)} bad row(s) skipped (see the messages above)")
    return 130 if interrupted else code
