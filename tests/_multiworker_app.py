"""A decorated FastAPI app for ``uvicorn --workers N`` with ``configure(prometheus=PORT)`` in every worker.

The port comes from ``APP_METRICS_PORT``: every worker asks for the same one, as a real app would.
"""

from __future__ import annotations

import os

from fastapi import FastAPI

import faithtrace

faithtrace.configure(prometheus=int(os.environ["APP_METRICS_PORT"]))
app = FastAPI()


@faithtrace.trace_faithfulness
def answer(question: str, contexts: list[str]) -> str:
    return "The capital of France is Paris."  # reworded: judged, not proven in code


@app.get("/ask")
def ask(q: str = "What is the capital of France?") -> dict[str, object]:
    return {"answer": answer(q, ["Paris is the capital of France."]), "pid": os.getpid()}
