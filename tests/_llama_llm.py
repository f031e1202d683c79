"""A LlamaIndex LLM with a fixed reply, streamed in fixed chunks: the real LLM interface, no model."""

from __future__ import annotations

from typing import Any, ClassVar

from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback


class ScriptedLLM(CustomLLM):
    """Answers ``answer``, streamed as ``chunks``; a test module subclasses it with its own texts."""

    answer: ClassVar[str] = ""
    chunks: ClassVar[list[str]] = []

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self.answer)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = ""
        for chunk in self.chunks:
            text += chunk
            yield CompletionResponse(text=text, delta=chunk)
