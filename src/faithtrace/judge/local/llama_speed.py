"""Costs llama-cpp-python pays for nothing in the judge server, removed in that process only (never a host's).

faithtrace asks the embedded judge for a short grammar-constrained JSON reply at temperature 0 with the top
log-probabilities of each output token. With llama-cpp-python's own code an output token cost 272 ms on
this 2-core CPU, against 36 ms for the model's forward pass (``benchmarks/judgment/judge_speed.py``); with
the first two changes below and a heap in place of the full sort, ~84 ms (a cProfile: 24 ms ranking the
vocabulary in Python, 17 ms in the grammar); with all four, the forward pass. ``install`` makes them; each
gives exactly the tokens of llama-cpp-python's own code, and its log-probabilities
(tests/test_local_judge_server.py compares them on the real model):

- ``eval_last_logits``: the output layer runs for the last prompt position of each batch only;
- ``_RowLogprobs``: only the rows a completion reads are normalised;
- ``_top_pairs``: the top log-probabilities come from a partial sort in numpy, not from sorting 152k
  Python tuples per token;
- ``greedy_grammar_first``: at temperature 0 the model's first choice is checked against the grammar alone,
  and the grammar runs over the whole vocabulary only when it rejects that choice (llama.cpp's own
  ``common_sampler_sample`` does the same).
"""

from __future__ import annotations

import builtins
import ctypes
import heapq
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

_TOP_K = 20  # OpenAI's maximum top_logprobs


class _RowLogprobs:
    """Log-softmax of a 2-D logits array, computed per row when a row is read.

    llama-cpp-python normalises the logits of *every* position of a request, prompt included (n_tokens x
    152k floats, about 0.7 GB for a 1,200-token request), then reads only the completion's rows: 16 % of the
    judge's time in a py-spy profile of RAGTruth evaluations. Each row read gets exactly what the whole-array
    call gives it (the reduction is along the row either way).
    """

    def __init__(self, logits: Any, one: Callable[[Any], Any]) -> None:
        self._logits = logits
        self._one = one

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return _RowLogprobs(self._logits[key], self._one)
        return self._one(self._logits[key])

    def __iter__(self) -> Any:
        return (self._one(row) for row in self._logits)

    def __len__(self) -> int:
        return len(self._logits)


class _RankedPairs:
    """``zip(row, range(len(row)))``, which llama-cpp-python builds only to sort a row's (logprob, token)
    pairs: the same iterator, whose row ``_top_pairs`` can rank without building 152k tuples."""

    def __init__(self, row: Any, ids: range) -> None:
        self.row = row
        self.started = False
        self._pairs = builtins.zip(row, ids, strict=True)

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        return self

    def __next__(self) -> tuple[Any, int]:
        self.started = True
        return next(self._pairs)


def _zip(*iterables: Any, **kwargs: Any) -> Any:
    np = sys.modules.get("numpy")  # not loaded: no row to rank
    if len(iterables) == 2 and not kwargs and np is not None:
        row, ids = iterables
        ranked = isinstance(row, np.ndarray) and row.ndim == 1 and isinstance(ids, range)
        if ranked and ids == range(len(row)):
            return _RankedPairs(row, ids)
    return builtins.zip(*iterables, **kwargs)  # noqa: B905 - the caller's own zip, its strict= included


def _top_pairs(items: Any, *, reverse: bool = False, **kwargs: Any) -> list[Any]:
    """``sorted`` for llama-cpp-python's completion code, which reverse-sorts a row's (logprob, token) pairs
    and reads only the first ``top_logprobs`` (at most 20): for such pairs, the first 20 in the same order
    (ties: higher token id first, as tuples compare). Anything else is sorted as it comes."""
    if reverse and not kwargs and isinstance(items, _RankedPairs) and not items.started:
        import numpy as np

        values = np.asarray(items.row)
        if not np.isnan(values).any():  # NaN has no order; sorted() would be the only reference
            n = len(values)
            if n > _TOP_K:
                kth = np.partition(values, n - _TOP_K)[n - _TOP_K]
                ids = np.flatnonzero(values >= kth)  # every tie of the 20th value, ordered below
            else:
                ids = np.arange(n)
            return heapq.nlargest(_TOP_K, builtins.zip(values[ids], ids.tolist(), strict=True))
    return builtins.sorted(items, reverse=reverse, **kwargs)


def eval_last_logits(llm: Any, tokens: Sequence[int]) -> None:
    """``Llama.eval`` with logits computed for the last token of each batch only, as without
    ``logits_all``, while the model still counts as keeping them all (so it returns log-probabilities).

    Why: llama-cpp-python serves log-probabilities only from a model made with ``logits_all``, which runs
    the 152k-word output layer over every prompt token and copies each row (608 KB) into ``scores``. A
    completion's log-probabilities are read from the row before each of its tokens: the prompt's last row,
    then one row per single-token decode step, all of which this computes. The prompt's other rows are left
    unwritten, so this server refuses requests for the prompt's own log-probabilities (``echo`` with
    ``logprobs``, ``refuse_prompt_logprobs``), which faithtrace never makes. A 1,200-token prompt on 2
    threads here: 20.5 s with every row, 17.0 s with the last (llama.cpp built for AVX2; 14.8 s and 12.6 s
    for AVX-512), by ``benchmarks/judgment/judge_speed.py``.
    """
    import numpy as np

    llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
    for i in range(0, len(tokens), llm.n_batch):
        batch = tokens[i : min(len(tokens), i + llm.n_batch)]
        n_past = llm.n_tokens
        n_tokens = len(batch)
        llm._batch.set_batch(batch=batch, n_past=n_past, logits_all=False)
        llm._ctx.decode(llm._batch)
        llm.input_ids[n_past : n_past + n_tokens] = batch
        if llm._logits_all:
            # With one output in the batch, llama.cpp's logits buffer holds that one row.
            row = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm._n_vocab,))
            llm.scores[n_past + n_tokens - 1, :] = row
        llm.n_tokens += n_tokens
        llm._requires_eval = False


def refuse_prompt_logprobs(create: Callable[..., Any]) -> Callable[..., Any]:
    """``create`` (llama-cpp-python's ``Llama._create_completion``, which every completion path calls with
    keywords), refusing requests for the prompt's own log-probabilities: ``eval_last_logits`` does not compute
    them, and a wrong answer must not look like a right one."""

    def _create_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("echo") and kwargs.get("logprobs") is not None:
            raise ValueError(
                "this judge server does not return the prompt's log-probabilities (echo with logprobs)"
            )
        return create(self, *args, **kwargs)

    return _create_completion


# The sampler chain llama-cpp-python builds at temperature 0 with a grammar (``Llama._init_sampler``): the
# repeat penalties ("?penalties" when they are off: a sampler that does nothing), the grammar, greedy.
_PENALTIES = (b"penalties", b"?penalties")


class _Candidates:
    """A reusable llama_token_data array over the whole vocabulary (llama.cpp keeps one per chain too)."""

    def __init__(self, n_vocab: int) -> None:
        import llama_cpp
        import numpy as np

        self.data = (llama_cpp.llama_token_data * n_vocab)()
        self.view = np.ctypeslib.as_array(self.data)
        self.ids = np.arange(n_vocab, dtype=self.view["id"].dtype)
        self.one = (llama_cpp.llama_token_data * 1)()

    def array(self, data: Any, size: int) -> Any:
        import llama_cpp

        return llama_cpp.llama_token_data_array(
            data=ctypes.cast(data, llama_cpp.llama_token_data_p), size=size, selected=-1, sorted=False
        )


_candidates: dict[int, _Candidates] = {}


def greedy_grammar_first(sampler: Any, ctx: Any, idx: int = -1) -> int:
    """``LlamaSampler.sample`` for llama-cpp-python's greedy grammar chain (penalties, grammar, greedy), as
    ``llama_sampler_sample`` computes it, with the grammar checked on the best token first.

    The grammar sampler decodes and matches every one of the 152k candidate tokens: 17 ms per output token
    here, where the model's own forward pass takes 43 ms. At temperature 0 the result is the candidate with
    the highest logit among those the grammar allows, so when the grammar allows the overall best (nearly
    always, in a JSON reply the model is already writing) that is the answer; only when it does not does the
    grammar run over the whole array. Any other chain is sampled by llama.cpp unchanged.
    """
    import llama_cpp
    import numpy as np

    chain = sampler.sampler
    n = llama_cpp.llama_sampler_chain_n(chain)
    parts = [llama_cpp.llama_sampler_chain_get(chain, i) for i in range(n)]
    names = [llama_cpp.llama_sampler_name(p) for p in parts]
    if len(parts) != 3 or names[0] not in _PENALTIES or names[1:] != [b"grammar", b"greedy"]:
        return int(llama_cpp.llama_sampler_sample(chain, ctx.ctx, idx))
    penalties, grammar, greedy = parts
    n_vocab = ctx.model.n_vocab()
    cand = _candidates.get(n_vocab)
    if cand is None:
        cand = _candidates[n_vocab] = _Candidates(n_vocab)
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ctx, idx), shape=(n_vocab,))
    cand.view["id"] = cand.ids
    cand.view["logit"] = logits
    cand.view["p"] = 0.0
    whole = cand.array(cand.data, n_vocab)
    llama_cpp.llama_sampler_apply(penalties, ctypes.byref(whole))
    best = int(np.argmax(cand.view["logit"]))  # the first of equal maxima, as llama.cpp's greedy picks
    cand.one[0] = cand.data[best]
    one = cand.array(cand.one, 1)
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(one))
    if math.isinf(cand.one[0].logit) and cand.one[0].logit < 0:  # the grammar rejects the best token
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(whole))
        llama_cpp.llama_sampler_apply(greedy, ctypes.byref(whole))
        best = whole.selected
    token = int(cand.data[best].id)
    llama_cpp.llama_sampler_accept(chain, token)
    return token


def patches() -> list[tuple[Any, str, Any]]:
    """(object, attribute, replacement) for each change ``install`` makes, so tests can make them undoably."""
    import llama_cpp._internals as internals
    import llama_cpp.llama as module

    whole = module.Llama.logits_to_logprobs

    def logits_to_logprobs(logits: Any, axis: int = -1) -> Any:
        if axis == -1 and getattr(logits, "ndim", 1) == 2:
            return _RowLogprobs(logits, whole)
        return whole(logits, axis)

    return [
        (module, "sorted", _top_pairs),
        (module, "zip", _zip),
        (module.Llama, "logits_to_logprobs", staticmethod(logits_to_logprobs)),
        (module.Llama, "eval", eval_last_logits),
        (module.Llama, "_create_completion", refuse_prompt_logprobs(module.Llama._create_completion)),
        (internals.LlamaSampler, "sample", greedy_grammar_first),
    ]


def install() -> None:
    """Patch llama-cpp-python, in this (server) process only, so that log-probabilities and grammar cost what
    they must and nothing more. Each replacement gives the same tokens and log-probabilities."""
    for target, name, value in patches():
        setattr(target, name, value)
