"""faithtrace's benchmarks, one folder per question a user asks (README.md says which script answers what).

A package so that every script imports the shared helpers and its neighbours by one full name
(``benchmarks._shared.common``, ``benchmarks.fleet.fleet``): each script puts the checkout's root on
``sys.path`` and runs as ``python benchmarks/<folder>/<script>.py``.
"""
