"""``faithtrace serve``: an OTLP trace receiver (gRPC and HTTP) that scores the RAG traces it is sent and
exports the results over OTLP on behalf of each app. Needs ``faithtrace[serve]``."""
