"""The judge's prompt and reply on its ``chat {model}`` span, in the two forms trace UIs read.

GenAI semantic conventions (>= 1.37): ``gen_ai.input.messages`` / ``gen_ai.output.messages`` as JSON arrays
of ``{"role", "parts": [{"type": "text", "content"}]}`` (output messages add ``finish_reason``).
OpenInference: flattened ``llm.input_messages.{i}.message.role|content`` and ``llm.output_messages.*``, which
Phoenix renders in its LLM view. Its span lists show ``input.value`` / ``output.value`` instead (a judge span
without them reads ``--`` and the reply's id there): the prompt's last user message, which holds what is
being judged, and the reply text. Every text goes through the same exporter as any other captured text
(secrets scrubbed, the redaction hook, the size cap), so the JSON stays valid however long the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from faithtrace._telemetry import names as n
from faithtrace.judge import LLMCall

Export = Callable[[str, str], str]


def _message(role: str, text: str, finish_reason: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": text}]}
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return message


def message_attributes(call: LLMCall, export: Export) -> dict[str, Any]:
    """The prompt and reply attributes of one judge call (call only when content capture is on)."""
    attrs: dict[str, Any] = {
        n.OPENINFERENCE_SPAN_KIND: n.OPENINFERENCE_KIND_LLM,
        n.LLM_MODEL_NAME: call.model,
    }
    inputs = []
    for i, (role, content) in enumerate(call.input_messages):
        key = n.LLM_INPUT_MESSAGE_CONTENT.format(index=i)
        text = export(key, content)
        attrs[n.LLM_INPUT_MESSAGE_ROLE.format(index=i)] = role
        attrs[key] = text
        inputs.append(_message(role, text))
        if role == "user":
            attrs[n.INPUT_VALUE] = text  # the last one wins
    if inputs:
        attrs[n.GEN_AI_INPUT_MESSAGES] = json.dumps(inputs, ensure_ascii=False)
    if call.output_text is not None:
        key = n.LLM_OUTPUT_MESSAGE_CONTENT.format(index=0)
        text = export(key, call.output_text)
        attrs[n.LLM_OUTPUT_MESSAGE_ROLE.format(index=0)] = "assistant"
        attrs[key] = text
        attrs[n.OUTPUT_VALUE] = text
        reply = _message("assistant", text, call.finish_reason or "stop")
        attrs[n.GEN_AI_OUTPUT_MESSAGES] = json.dumps([reply], ensure_ascii=False)
    return attrs
