"""Run DeepEval's FaithfulnessMetric or RAGAS Faithfulness on rows through litellm; one JSON line per row.

Runs inside the peers' venv (see README): ``accuracy.py`` starts it as a subprocess with the same judge model,
``api_base`` and key that faithtrace uses. Every request goes through one counting wrapper around
``litellm.(a)completion``, so LLM calls and tokens are counted the same way for both peers (retries included).

Structured output: the llama.cpp server behind the embedded judge rejects ``json_schema``; it takes
``json_object`` (plus a ``schema`` key it turns into a grammar). DeepEval gets a DeepEvalBaseLLM wrapper that
asks for ``json_object`` with its own schema (``--schema-grammar``: the same mechanism faithtrace uses on that
server); RAGAS uses its own litellm path (``llm_factory(provider="litellm")``, instructor JSON mode).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DEEPEVAL_DISABLE_TIMEOUTS", "1")  # CPU judge calls take minutes; don't cut them off

import litellm


class Usage:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.failed_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def record(self, response: Any) -> None:
        self.calls += 1
        usage = getattr(response, "usage", None)
        self.input_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
        self.output_tokens += int(getattr(usage, "completion_tokens", 0) or 0)


USAGE = Usage()


def make_acompletion(api_base: str | None, api_key: str | None) -> Any:
    async def counted_acompletion(**kwargs: Any) -> Any:
        if api_base:
            kwargs.setdefault("api_base", api_base)
        if api_key:
            kwargs.setdefault("api_key", api_key)
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception:
            USAGE.calls += 1
            USAGE.failed_calls += 1
            raise
        USAGE.record(response)
        return response

    return counted_acompletion


def deepeval_runner(args: argparse.Namespace) -> Any:
    from deepeval.metrics import FaithfulnessMetric
    from deepeval.models import DeepEvalBaseLLM
    from deepeval.test_case import LLMTestCase

    acompletion = make_acompletion(args.api_base, args.api_key)

    class LiteLLMJudge(DeepEvalBaseLLM):
        def __init__(self) -> None:
            super().__init__(args.model)

        def load_model(self) -> Any:
            return self

        def _params(self, prompt: str, schema: Any) -> dict[str, Any]:
            params: dict[str, Any] = {
                "model": args.model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0,
                "max_tokens": args.max_tokens,
                "num_retries": 0,
                "timeout": args.timeout,
            }
            if schema is not None:
                fmt: dict[str, Any] = {"type": "json_object"}
                if args.schema_grammar:
                    fmt["schema"] = schema.model_json_schema()
                params["response_format"] = fmt
            return params

        async def a_generate(self, prompt: str, schema: Any = None) -> Any:
            response = await acompletion(**self._params(prompt, schema))
            text = response.choices[0].message.content or ""
            if schema is None:
                return text
            try:
                return schema.model_validate_json(text)
            except Exception:
                return text  # DeepEval's own JSON repair gets a go, as it would with any custom model

        def generate(self, prompt: str, schema: Any = None) -> Any:
            return asyncio.run(self.a_generate(prompt, schema))

        def get_model_name(self) -> str:
            return args.model

    judge = LiteLLMJudge()

    async def score(row: dict[str, Any]) -> dict[str, Any]:
        metric = FaithfulnessMetric(model=judge, include_reason=True, async_mode=True)
        case = LLMTestCase(
            input=row["question"], actual_output=row["answer"], retrieval_context=row["contexts"]
        )
        await metric.a_measure(case, _show_indicator=False)
        default = float(metric.score)
        # penalize_ambiguous_claims changes only the score formula over the same verdicts (idk/borderline no
        # longer pass), so it is computed from this run rather than paying for a second one on a CPU judge.
        metric.penalize_ambiguous_claims = True
        penalized = float(metric._calculate_score())
        verdicts = [str(getattr(v, "verdict", v)) for v in (metric.verdicts or [])]
        return {
            "scores": {"deepeval": default, "deepeval_penalize_ambiguous": penalized},
            "claims": len(metric.claims or []),
            "truths": len(metric.truths or []),
            "verdicts": verdicts,
        }

    return score


def ragas_runner(args: argparse.Namespace) -> Any:
    from ragas.llms import llm_factory
    from ragas.metrics.collections import Faithfulness

    llm = llm_factory(
        args.model,
        provider="litellm",
        client=make_acompletion(args.api_base, args.api_key),
        adapter="instructor",
        max_tokens=args.max_tokens,
        timeout=args.timeout,
    )
    metric = Faithfulness(llm=llm)

    async def score(row: dict[str, Any]) -> dict[str, Any]:
        result = await metric.ascore(
            user_input=row["question"], response=row["answer"], retrieved_contexts=row["contexts"]
        )
        value = result.value
        if value is None or value != value:  # NaN: RAGAS's way of saying it produced nothing usable
            raise ValueError(f"RAGAS returned {value!r}")
        return {"scores": {"ragas": float(value)}}

    return score


async def score_row(args: argparse.Namespace, runner: Any, row: dict[str, Any]) -> dict[str, Any]:
    USAGE.reset()
    t0 = time.perf_counter()
    record: dict[str, Any] = {"id": row["id"], "system": args.system}
    try:
        record.update(await asyncio.wait_for(runner(row), timeout=args.row_timeout))
        record["error"] = None
    except Exception as exc:
        record["scores"] = None
        record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    record.update(
        seconds=time.perf_counter() - t0,
        llm_calls=USAGE.calls,
        failed_calls=USAGE.failed_calls,
        input_tokens=USAGE.input_tokens,
        output_tokens=USAGE.output_tokens,
    )
    print(
        f"  {args.system} {row['id']}: {record['scores']} calls={USAGE.calls} "
        f"in={USAGE.input_tokens} out={USAGE.output_tokens} {record['seconds']:.1f}s"
        + (f" ERROR {record['error']}" if record["error"] else ""),
        flush=True,
    )
    return record


async def run(args: argparse.Namespace) -> None:
    runner = deepeval_runner(args) if args.system == "deepeval" else ragas_runner(args)
    if args.rows == "-":
        # Driven by accuracy.py: a row per stdin line, a "RESULT {json}" line back per row.
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.strip():
                record = await score_row(args, runner, json.loads(line))
                print("RESULT " + json.dumps(record), flush=True)
        return
    text = Path(args.rows).read_text(encoding="utf-8")  # noqa: ASYNC240 - once, before any request
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    with open(args.out, "a", encoding="utf-8") as out:  # noqa: ASYNC230 - a local file, a line per row
        for row in rows:
            record = await score_row(args, runner, row)
            out.write(json.dumps(record) + "\n")
            out.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=["deepeval", "ragas"], required=True)
    parser.add_argument("--rows", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-base")
    parser.add_argument("--api-key")
    parser.add_argument("--schema-grammar", action="store_true")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--row-timeout", type=float, default=1800.0)
    args = parser.parse_args()
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
