"""Where the embedded judge's time goes: prompt tokens, output tokens, and the code around each.

An evaluation sends the judge ~900 prompt tokens and gets ~80 back (RAGTruth, ``accuracy.py``), so the split
between the two costs decides what to shorten. This loads the bundled model with llama-cpp-python (no server)
and prints seconds for:

- one prompt of ``--tokens`` tokens, evaluated with logits for every position (as llama-cpp-python computes
  them for log-probabilities) and for the last position only (as faithtrace's judge server does);
- single-token decode steps (the model's forward pass alone);
- a verdict reply as faithtrace asks for it (JSON schema grammar, top-5 log-probabilities, temperature 0,
  the server's repeat penalty) for ``--claims`` claims, its prompt already cached, so the time is the output
  tokens': first with llama-cpp-python's own sampling and log-probability code, then with faithtrace's
  server patches (``faithtrace.judge.local.llama_speed``). The two replies must be the same; it says so.

    python benchmarks/judgment/judge_speed.py                   # 1,200 prompt tokens, 2 threads
    python benchmarks/judgment/judge_speed.py --threads 1

Run it with nothing else busy: the figures are CPU time on this machine, not a target.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from faithtrace.judge.local.model import ensure_bundled_model

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


Reply = dict[str, Any]


def _timed_reply(llm: Any, messages: list[dict[str, str]], schema: dict[str, Any]) -> tuple[float, Reply]:
    # The same request twice: the second finds its prompt in the KV cache, so it times the output tokens. The
    # first only has to put the prompt there, so it stops at one output token (a whole reply through
    # llama-cpp-python's own code costs ~0.4 s a token here, and was thrown away).
    def ask(max_tokens: int = 400) -> Reply:
        return llm.create_chat_completion(  # type: ignore[no-any-return]
            messages=messages,
            temperature=0.0,
            repeat_penalty=1.1,  # llama-cpp-python's server default, which faithtrace's requests get
            max_tokens=max_tokens,
            response_format={"type": "json_object", "schema": schema},
            logprobs=True,
            top_logprobs=5,
        )

    ask(max_tokens=1)
    start = time.perf_counter()
    out = ask()
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    import llama_cpp

    from faithtrace.judge.local import llama_speed
    from faithtrace.scoring import prompts, steps

    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    parser.add_argument("--tokens", type=int, default=1200)
    parser.add_argument("--decode", type=int, default=20)
    parser.add_argument("--claims", type=int, default=8)
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
    claims = [s.strip() + "." for s in _TEXT.split(".") if s.strip()][: args.claims]
    claims = (claims * (1 + args.claims // max(1, len(claims))))[: args.claims]
    messages = prompts.evidence_verdict_messages(claims, [_TEXT[:320]] * len(claims))
    schema = steps._verdicts_reply(len(claims), yes_no=True).model_json_schema()

    every = min(_timed_eval(llm, tokens) for _ in range(2))
    own_s, own = _timed_reply(llm, messages, schema)
    llama_speed.install()  # this process only: what faithtrace's judge server runs with
    # Straight after the unpatched reply, whose prompt is still in the KV cache: the patched code evaluates
    # the prompt's last token again itself (llama-cpp-python always does, for its logits), and the prompt is
    # not paid for a second time.
    ours_s, ours = _timed_reply(llm, messages, schema)
    last = min(_timed_eval(llm, tokens) for _ in range(2))
    start = time.perf_counter()
    for tok in tokens[: args.decode]:
        llm.eval([tok])
    decode = (time.perf_counter() - start) / args.decode
    n_out = own["usage"]["completion_tokens"]
    same = own["choices"][0]["message"]["content"] == ours["choices"][0]["message"]["content"] and [
        t["token"] for t in own["choices"][0]["logprobs"]["content"]
    ] == [t["token"] for t in ours["choices"][0]["logprobs"]["content"]]
    print(f"llama-cpp-python {llama_cpp.__version__}, {args.threads} threads, {len(tokens)} prompt tokens")
    print(f"prompt, logits for every position: {every:.2f} s ({len(tokens) / every:.0f} tokens/s)")
    print(f"prompt, logits for the last only:  {last:.2f} s ({len(tokens) / last:.0f} tokens/s)")
    print(f"decode, one token at a time:       {decode * 1000:.0f} ms per token (forward pass only)")
    print(f"verdict reply for {len(claims)} claims, {n_out} output tokens, prompt cached:")
    print(
        f"  llama-cpp-python's own code:     {own_s:.2f} s ({own_s / n_out * 1000:.0f} ms per output token)"
    )
    print(
        f"  faithtrace's judge server:       {ours_s:.2f} s ({ours_s / n_out * 1000:.0f} ms per output token)"
    )
    print(f"  same reply and tokens: {'yes' if same else 'NO'}")
    llm.close()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
