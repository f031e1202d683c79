"""What lands in the app's traces and when: how long a RAG span is held for its evaluation, and what a crash
of the app loses of the spans it held."""
