"""Where the embedded judge's time goes: prompt tokens against output tokens, in this process.

An evaluation sends the judge ~900 prompt tokens and gets ~80 back (RAGTruth, ``accuracy.py``), so the split
between the two costs decides what to shorten. This loads the bundled model with llama-cpp-python (no server),
evaluates one prompt of ``--tokens`` tokens twice (logits for every position, as llama-cpp-python's server
computes them for log-probabilities, and for the last position only, as faithtrace's server does), then
decodes ``--decode`` tokens one at a time, and prints seconds for each.

    python benchmarks/judge_speed.py                   # 1,200 prompt tokens, 2 threads
    python benchmarks/judge_speed.py --threads 1

Run it with nothing else busy: the figures are CPU time on this machine, not a target.
"""

from __future__ import annotations

import argparse
import time

from faithtrace.judge._model import ensure_bundled_model

# Prose of the kind the judge reads (documents, claims); repeated to the length asked for.
_TEXT = (
    "The quarterly meeting is held on Tuesday in room 4, and lunch is served at noon. Preheat the oven to "
    "350 degrees F, season the roast with two tablespoons of the house seasoning and cook it for six to "
    "eight hours, until the meat shreds easily. Communicable diseases pass from one person to another; "
    "non-communicable diseases stay with the person who has them. "
)


def _timed_eval(llm: object, tokens: list[int]) -> float:
    llm.reset()  # type: ignore[attr-defined]
    start = time.perf_counter()
    llm.eval(tokens)  # type: ignore[attr-defined]
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    import llama_cpp

    from faithtrace.judge import _serve

    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    parser.add_argument("--tokens", type=int, default=1200)
    parser.add_argument("--decode", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    llm = llama_cpp.Llama(
        str(ensure_bundled_model()),
        n_ctx=max(2048, args.tokens + args.decode + 16),
        n_threads=args.threads,
        n_threads_batch=args.threads,
        logits_all=True,
        verbose=False,
    )
    text = _TEXT * (1 + args.tokens // 60)
    tokens = llm.tokenize(text.encode())[: args.tokens]
    every = min(_timed_eval(llm, tokens) for _ in range(2))
    llm.eval = lambda toks: _serve.eval_last_logits(llm, toks)  # type: ignore[method-assign]
    last = min(_timed_eval(llm, tokens) for _ in range(2))
    start = time.perf_counter()
    for tok in tokens[: args.decode]:
        llm.eval([tok])
    decode = (time.perf_counter() - start) / args.decode
    print(f"llama-cpp-python {llama_cpp.__version__}, {args.threads} threads, {len(tokens)} prompt tokens")
    print(f"prompt, logits for every position: {every:.2f} s ({len(tokens) / every:.0f} tokens/s)")
    print(f"prompt, logits for the last only:  {last:.2f} s ({len(tokens) / last:.0f} tokens/s)")
    print(f"decode, one token at a time:       {decode * 1000:.0f} ms per token (forward pass only)")
    llm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
