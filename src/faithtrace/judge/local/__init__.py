"""The embedded judge: a llama.cpp server on loopback, started on demand, shared by this machine's processes.

``endpoint`` is its API (start, find, stop, status); ``process`` finds, starts and stops the server process;
``server`` runs inside it (``python -m faithtrace.judge.local.server``, so this package imports nothing at
its own import); ``model`` provides its model file; ``llama_speed`` patches llama-cpp-python.
"""
