"""The faithtrace example RAG service (see README.md)."""
