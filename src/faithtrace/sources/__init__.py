"""Finding RAG work in spans that other code recorded: faithtrace's own remote-scored spans, OpenInference
traces (LlamaIndex, LangChain) and configurable conventions. Shared by ``faithtrace serve`` (spans from OTLP)
and ``score_openinference()`` (spans of this process)."""
