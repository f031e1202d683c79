"""The runtime: ``configure()`` and the live state it swaps in, the pending span that ends each RAG span, the
sampler, the background worker, faithtrace's own event loop and the thread watcher."""
