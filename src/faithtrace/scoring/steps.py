"""The pipeline's LLM steps: each has pydantic input/output models, its own prompt and one ``generate`` call.

A step returns its output plus the ``LLMCall`` records it produced; on failure the judge client raises a
``JudgeError`` carrying the same records, which the pipeline turns into an error result.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from faithtrace.judge import Judge, OutputRejected
from faithtrace.scoring import confidence, prompts
from faithtrace.scoring.models import ClaimVerdict, LLMCall, Verdict

# Output budgets per step: enough for real work, small enough that a looping small model stops quickly.
_TRUTHS_MAX_TOKENS = 768
_CLAIMS_MAX_TOKENS = 1024
_VERDICT_TOKENS_PER_CLAIM = 48  # ~12 used; room for a provider that adds a reason
_REASON_MAX_TOKENS = 256
_T = TypeVar("_T")
# For ``estimated_tokens``, per claim: its verdict entry ({"claim": 3, "verdict": "yes"}, ~15 tokens) and
# what its numbers, tags and punctuation cost beyond four characters a token; per message, the chat template.
_TOKENS_PER_CLAIM = 20
_TEMPLATE_TOKENS_PER_MESSAGE = 5


def _clean(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        text = " ".join(str(item).split())
        if text and text.lower() not in seen:  # small models repeat themselves; a duplicate is one claim
            seen.add(text.lower())
            out.append(text)
    return out


# --- reply schemas (what the judge must produce) --------------------------------------------------
class _TruthsReply(BaseModel):
    truths: list[str]


class _ClaimsReply(BaseModel):
    claims: list[str]


def _strict_item_schema(schema: dict[str, Any]) -> None:
    # What the judge is asked for is stricter than what we accept: the claim number and the verdict, both
    # required (a grammar then makes the local judge write them, number first, which keeps a 1.5B model in
    # step with the list). No reason is asked for: output tokens are the slow part on a CPU (about 15 per
    # second) and the explanation is written in code. Validation still takes a reason, or no number, from
    # providers that ignore schemas.
    schema["required"] = ["claim", "verdict"]
    schema["properties"] = {
        "claim": {"type": "integer", "minimum": 1},
        "verdict": schema["properties"]["verdict"],
    }


class _VerdictItem(BaseModel):
    model_config = ConfigDict(json_schema_extra=_strict_item_schema)

    claim: int | None = None
    verdict: Verdict
    reason: str | None = None

    @field_validator("verdict", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


def _yes_no_item_schema(schema: dict[str, Any]) -> None:
    _strict_item_schema(schema)
    schema["properties"]["verdict"] = {"type": "string", "enum": ["yes", "no"]}


class _YesNoItem(_VerdictItem):
    """Asked for yes or no only (``prompts.evidence_verdict_messages``); an "idk" is still accepted."""

    model_config = ConfigDict(json_schema_extra=_yes_no_item_schema)


class _VerdictsReplyBase(BaseModel):
    verdicts: list[_VerdictItem]

    @field_validator("verdicts", mode="before")
    @classmethod
    def _bare(cls, value: Any) -> Any:
        # Some models answer with a bare list of verdicts (["yes", "idk"]): positions are the claim order.
        if isinstance(value, list):
            return [{"verdict": v} if isinstance(v, str) else v for v in value]
        return value


@functools.lru_cache(maxsize=64)
def _verdicts_reply(n: int, yes_no: bool = False) -> type[_VerdictsReplyBase]:
    # The exact count goes into the JSON schema only (llama.cpp turns it into a grammar, so the local
    # judge cannot produce a wrong count); validation does not enforce it, so that a wrong count from a
    # provider that ignores the schema surfaces as ``verdict_count_mismatch`` through ``check`` rather than
    # as a parse error.
    item = _YesNoItem if yes_no else _VerdictItem
    return create_model(
        f"Verdicts{n}{'YesNo' if yes_no else ''}",
        __base__=_VerdictsReplyBase,
        verdicts=(list[item], Field(json_schema_extra={"minItems": n, "maxItems": n})),  # type: ignore[valid-type]
    )


class _ReasonReply(BaseModel):
    reason: str = Field(json_schema_extra={"maxLength": 800})


# --- step inputs and outputs ----------------------------------------------------------------------
class TruthsInput(BaseModel):
    document: str


class TruthsOutput(BaseModel):
    truths: list[str]


class ClaimsInput(BaseModel):
    question: str | None
    answer: str


class ClaimsOutput(BaseModel):
    claims: list[str]


class VerdictsInput(BaseModel):
    documents: list[str]
    claims: list[str]
    truths: list[str] = Field(default_factory=list)
    question: str | None = None
    # Per claim, the document text to judge it against instead of the whole documents (local judge).
    evidence: list[str] | None = None
    # With evidence: per claim, its words no document uses (numbers, names, added details). A claim with any
    # is asked about those words (``prompts.focus_verdict_messages``); the others get the plain question.
    focus: list[list[str]] | None = None
    # Read the verdict tokens' log-probabilities (``confidence``), and the P(yes) a "yes" needs.
    logprobs: bool = False
    min_p_supported: float = 0.0


class VerdictsOutput(BaseModel):
    verdicts: list[ClaimVerdict]


class ReasonInput(BaseModel):
    score_text: str
    findings: list[tuple[str, str, str | None]]  # (claim, STATUS_TEXT of its status, its reason)


class ReasonOutput(BaseModel):
    reason: str


# --- steps ----------------------------------------------------------------------------------------
async def extract_truths(judge: Judge, data: TruthsInput) -> tuple[TruthsOutput, list[LLMCall]]:
    reply = await judge.generate(
        step="truths",
        messages=prompts.truths_messages(data.document),
        schema=_TruthsReply,
        max_tokens=_TRUTHS_MAX_TOKENS,
    )
    return TruthsOutput(truths=_clean(reply.value.truths)), reply.calls


async def extract_claims(judge: Judge, data: ClaimsInput) -> tuple[ClaimsOutput, list[LLMCall]]:
    reply = await judge.generate(
        step="claims",
        messages=prompts.claims_messages(data.question, data.answer),
        schema=_ClaimsReply,
        max_tokens=_CLAIMS_MAX_TOKENS,
    )
    return ClaimsOutput(claims=_clean(reply.value.claims)), reply.calls


def _align(reply: _VerdictsReplyBase, n: int) -> list[_VerdictItem]:
    """The reply's verdicts in claim order, or ``OutputRejected`` (the client re-asks, then fails)."""
    items = reply.verdicts
    if len(items) != n:
        raise OutputRejected(
            "verdict_count_mismatch", f"expected exactly {n} verdicts (one per claim), got {len(items)}"
        )
    numbers = [item.claim for item in items]
    if all(num is None for num in numbers):
        return list(items)
    if sorted(num or 0 for num in numbers) != list(range(1, n + 1)):
        raise OutputRejected(
            "verdict_misaligned",
            f"the verdicts' claim numbers {numbers} do not cover claims 1..{n} exactly once",
        )
    return sorted(items, key=lambda item: item.claim or 0)


def _batch_messages(
    documents: Sequence[str],
    claims: Sequence[str],
    truths: Sequence[str],
    question: str | None,
    evidence: Sequence[str] | None,
    focus: Sequence[Sequence[str]] | None,
) -> list[dict[str, str]]:
    if evidence is not None and focus is not None:
        return prompts.focus_verdict_messages(claims, evidence, focus)
    if evidence is not None:
        return prompts.evidence_verdict_messages(claims, evidence, question)
    return prompts.verdict_messages(documents, claims, truths or None, question)


async def judge_batch(
    judge: Judge,
    documents: Sequence[str],
    claims: Sequence[str],
    truths: Sequence[str],
    question: str | None = None,
    evidence: Sequence[str] | None = None,
    logprobs: bool = False,
    min_p_supported: float = 0.0,
    focus: Sequence[Sequence[str]] | None = None,
) -> tuple[list[ClaimVerdict], list[LLMCall]]:
    n = len(claims)
    # Claims judged whole against their evidence are asked yes or no (see the prompt).
    schema = _verdicts_reply(n, yes_no=evidence is not None and focus is None)

    def check(reply: _VerdictsReplyBase) -> None:
        _align(reply, n)

    reply = await judge.generate(
        step="verdicts",
        messages=_batch_messages(documents, claims, truths, question, evidence, focus),
        schema=schema,
        check=check,
        max_tokens=32 + _VERDICT_TOKENS_PER_CLAIM * n,
        logprobs=logprobs,
    )
    items = _align(reply.value, n)
    # Read in reply order, which _align may have sorted into claim order.
    dists = confidence.verdict_distributions(reply.logprobs or [], n) if reply.logprobs else [None] * n
    by_item = {id(item): dist for item, dist in zip(reply.value.verdicts, dists, strict=False)}
    verdicts = []
    for claim, item in zip(claims, items, strict=True):
        dist = by_item.get(id(item))
        verdict = confidence.decide(item.verdict, dist, min_p_supported)
        reason = (item.reason or "").strip() or None
        note = confidence.note(item.verdict, verdict, dist)
        if note:
            reason = f"{reason} ({note})" if reason else note
        verdicts.append(
            ClaimVerdict(
                text=claim,
                verdict=verdict,
                reason=reason,
                judge_verdict=item.verdict,  # what the judge wrote, whatever its confidence made of it
                p_supported=None if dist is None else round(dist["yes"], 4),
            )
        )
    return verdicts, reply.calls


async def judge_claims(
    judge: Judge, data: VerdictsInput, batch_size: int
) -> tuple[VerdictsOutput, list[LLMCall]]:
    """One verdict per claim, ``batch_size`` claims per call; batches run one after another.

    Sequential on purpose: on the local judge each batch reuses the documents' KV cache from the previous
    request, and with a hosted judge the concurrency limit is shared with other evaluations anyway. With
    ``focus``, claims with words to find and the others are asked in separate batches (two questions).
    """
    found: dict[int, ClaimVerdict] = {}
    calls: list[LLMCall] = []
    for batch, words in _batches(data, batch_size):
        try:
            got, batch_calls = await judge_batch(
                judge,
                data.documents,
                [data.claims[i] for i in batch],
                data.truths,
                data.question,
                _pick(data.evidence, batch),
                logprobs=data.logprobs,
                min_p_supported=data.min_p_supported,
                focus=_pick(words, batch),
            )
        except Exception as exc:
            prior = list(getattr(exc, "calls", []))
            exc.calls = calls + prior  # type: ignore[attr-defined]
            raise
        if words is not None:
            got = [_focus_reason(v, words[i]) for v, i in zip(got, batch, strict=True)]
        found.update(zip(batch, got, strict=True))
        calls.extend(batch_calls)
    return VerdictsOutput(verdicts=[found[i] for i in range(len(data.claims))]), calls


def estimated_tokens(data: VerdictsInput, batch_size: int) -> int:
    """The judge tokens ``judge_claims(data, batch_size)`` will spend, estimated from the very messages it
    sends: four characters per token, plus ``_TOKENS_PER_CLAIM`` and the chat template.

    Against the embedded judge's own counts on the 117 RAGTruth dev rows that call it (all their claims): 64
    tokens over on average, at most 43 under.
    """
    total = 0
    for batch, words in _batches(data, batch_size):
        messages = _batch_messages(
            data.documents,
            [data.claims[i] for i in batch],
            data.truths,
            data.question,
            _pick(data.evidence, batch),
            _pick(words, batch),
        )
        chars = sum(len(m["content"]) for m in messages)
        total += (
            -(-chars // 4) + _TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + _TOKENS_PER_CLAIM * len(batch)
        )
    return total


def _batches(data: VerdictsInput, batch_size: int) -> Iterator[tuple[list[int], list[list[str]] | None]]:
    """The claims' indexes per request, in the order ``judge_claims`` sends them, with the words to find."""
    for group, words in _questions(data):
        for start in range(0, len(group), batch_size):
            yield group[start : start + batch_size], words


def _pick(per_claim: Sequence[_T] | None, batch: Sequence[int]) -> list[_T] | None:
    return None if per_claim is None else [per_claim[i] for i in batch]


def _questions(data: VerdictsInput) -> list[tuple[list[int], list[list[str]] | None]]:
    """The claims' indexes per question, with the words to find where the question is about them."""
    everything = list(range(len(data.claims)))
    focus = data.focus
    if data.evidence is None or focus is None:
        return [(everything, None)]
    return [([i for i in everything if not focus[i]], None), ([i for i in everything if focus[i]], focus)]


def _focus_reason(verdict: ClaimVerdict, words: Sequence[str]) -> ClaimVerdict:
    """Say which words the judge was asked about, where it did not find them: that is what a reader checks."""
    if verdict.verdict == "yes" or verdict.judge_verdict == "yes":
        # A hesitant "yes" found the words, just not surely: its reason already says so.
        return verdict
    shown = ", ".join(f"'{w}'" for w in words[:6])
    note = f"the judge did not find {shown} in the evidence"
    return verdict.model_copy(update={"reason": f"{verdict.reason} ({note})" if verdict.reason else note})


async def write_reason(judge: Judge, data: ReasonInput) -> tuple[ReasonOutput, list[LLMCall]]:
    reply = await judge.generate(
        step="reason",
        messages=prompts.reason_messages(data.score_text, data.findings),
        schema=_ReasonReply,
        max_tokens=_REASON_MAX_TOKENS,
    )
    return ReasonOutput(reason=" ".join(reply.value.reason.split())), reply.calls
