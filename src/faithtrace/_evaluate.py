"""``evaluate()`` / ``aevaluate()``: score one answer against its retrieved context, outside any tracing."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from faithtrace._common.errors import ConfigError
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace._config.settings import resolve_judge
from faithtrace._runtime import loop
from faithtrace.judge import Judge
from faithtrace.scoring.models import FaithfulnessResult
from faithtrace.scoring.pipeline import run_pipeline

JudgeArg = str | JudgeSettings | Judge | None

# Judges are shared per settings so that the concurrency limit, the structured-output mode learnt from the
# provider and the local endpoint are shared by every call with the same configuration.
_MAX_JUDGES = 16
_judges: OrderedDict[tuple[str, str | None], Judge] = OrderedDict()
_judges_lock = threading.Lock()


def resolve_settings(judge: str | JudgeSettings | None) -> JudgeSettings:
    """Settings given as they are; otherwise from a model string and the environment."""
    return judge if isinstance(judge, JudgeSettings) else resolve_judge(judge)


def get_judge(judge: JudgeArg = None) -> Judge:
    """The shared ``Judge`` for these settings (one per configuration, bounded)."""
    if isinstance(judge, Judge):
        return judge
    settings = resolve_settings(judge)
    secret = settings.api_key.get_secret_value() if settings.api_key is not None else None
    key = (settings.model_dump_json(), secret)  # the JSON dump masks the key: keep it apart so keys differ
    with _judges_lock:
        found = _judges.get(key)
        if found is None:
            found = _judges[key] = Judge(settings)
            while len(_judges) > _MAX_JUDGES:
                _judges.popitem(last=False)
        else:
            _judges.move_to_end(key)
        return found


def _check_inputs(
    query: object, contexts: object, answer: object, options: object
) -> tuple[str | None, list[str], str, ScoringOptions]:
    if query is not None and not isinstance(query, str):
        raise ConfigError(f"query: expected a string or None, got {type(query).__name__}")
    if not isinstance(answer, str):
        raise ConfigError(f"answer: expected a string, got {type(answer).__name__}")
    if isinstance(contexts, str):
        docs = [contexts]
    elif isinstance(contexts, Sequence) and all(isinstance(c, str) for c in contexts):
        docs = list(contexts)
    else:
        raise ConfigError("contexts: expected a string or a list of strings")
    if options is None:
        options = ScoringOptions.from_env()
    elif not isinstance(options, ScoringOptions):
        raise ConfigError(f"options: expected ScoringOptions, got {type(options).__name__}")
    return query, docs, answer, options


async def aevaluate(
    query: str | None,
    contexts: str | Sequence[str],
    answer: str,
    *,
    judge: str | JudgeSettings | None = None,
    options: ScoringOptions | None = None,
) -> FaithfulnessResult:
    """Score how faithful ``answer`` is to ``contexts`` (the retrieved documents).

    Args:
        query: the user's question (helps make claims self-contained); may be None.
        contexts: the retrieved text: one string or a list of documents.
        answer: the answer to check.
        judge: None (``FAITHTRACE_JUDGE_*`` or else the embedded local judge), a litellm model string, or
            ``JudgeSettings``.
        options: ``ScoringOptions``; defaults from ``FAITHTRACE_*``.

    Returns:
        A ``FaithfulnessResult``. Judge failures do not raise: they give ``outcome="error"`` and ``error``.

    Raises:
        ConfigError: an argument is invalid.
    """
    q, docs, text, opts = _check_inputs(query, contexts, answer, options)
    return await run_pipeline(q, docs, text, judge=get_judge(judge), options=opts)


def evaluate(
    query: str | None,
    contexts: str | Sequence[str],
    answer: str,
    *,
    judge: str | JudgeSettings | None = None,
    options: ScoringOptions | None = None,
) -> FaithfulnessResult:
    """Blocking ``aevaluate``; safe to call from inside a running event loop (Jupyter, sync web handlers).

    The evaluation runs on faithtrace's own event loop (one per process, on a daemon thread), so the caller's
    loop is neither re-entered nor patched, and litellm's per-loop clients outlive the call instead of being
    stranded on a loop closed after each call.
    """
    q, docs, text, opts = _check_inputs(query, contexts, answer, options)
    judge_obj = get_judge(judge)
    return loop.run(run_pipeline(q, docs, text, judge=judge_obj, options=opts))
