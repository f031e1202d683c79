"""A judge stand-in: an OpenAI-compatible chat server on 127.0.0.1 with a fixed latency per request.

It answers whatever structured output the request asks for (``json_schema``, ``json_object`` + ``schema`` as
llama.cpp takes it, or a forced tool call) with an instance of the requested schema, so litellm's real client
path and faithtrace's real parsing path both run. Claims it invents are numbered ("Fake claim 3 …"); when
a later request quotes them back, every array in the reply gets one item per quoted claim, so a verdict list
always matches the claims the pipeline extracted, whatever the prompt's layout.

Run as a subprocess: ``python fakejudge.py --latency 0.3`` prints ``PORT <n>`` and serves until stdin closes
(its parent died or let go), ``--max-seconds`` pass, or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import re
import signal
import sys
import time
from typing import Any

from aiohttp import web

_CLAIM_RE = re.compile(r"Fake claim (\d+)\b")
_VERDICT_CYCLE = ("yes", "no", "idk")


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node[part]
        return _resolve(node, root)
    return schema


def instance(schema: dict[str, Any], root: dict[str, Any], *, n_items: int, index: int = 0) -> Any:
    """A small valid instance of ``schema``; arrays get ``n_items`` items, enums cycle by array index."""
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if _resolve(s, root).get("type") != "null"] or schema[key]
            return instance(options[0], root, n_items=n_items, index=index)
    if "allOf" in schema:
        return instance(schema["allOf"][0], root, n_items=n_items, index=index)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        values = list(schema["enum"])
        if set(_VERDICT_CYCLE) <= set(values):
            return _VERDICT_CYCLE[index % len(_VERDICT_CYCLE)]
        return values[index % len(values)]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        props: dict[str, Any] = schema.get("properties", {})
        return {
            name: _value_for(name, sub, root, n_items=n_items, index=index) for name, sub in props.items()
        }
    if kind == "array":
        lo = int(schema.get("minItems", 0))
        hi = int(schema.get("maxItems", max(n_items, lo)))
        count = min(max(n_items, lo), hi)
        items = schema.get("items", {"type": "string"})
        return [instance(items, root, n_items=n_items, index=i) for i in range(count)]
    if kind == "integer":  # item numbers: "claim": 1..n when the schema says minimum 1
        return index + int(schema.get("minimum", 0))
    if kind == "number":
        return 0.5
    if kind == "boolean":
        return index % 2 == 0
    return f"item {index + 1}"


def _value_for(name: str, sub: dict[str, Any], root: dict[str, Any], *, n_items: int, index: int) -> Any:
    resolved = _resolve(sub, root)
    if resolved.get("type") == "array":
        items = _resolve(resolved.get("items", {}), root)
        if items.get("type", "string") == "string" and "claim" in name.lower():
            return [f"Fake claim {i + 1} about the answer." for i in range(n_items)]
    if resolved.get("type") == "string" and "enum" not in resolved and "reason" in name.lower():
        return f"Fake reason {index + 1}."
    return instance(sub, root, n_items=n_items, index=index)


def _fallback_schema() -> dict[str, Any]:
    # A request with no schema (plain JSON mode): cover the shapes a faithfulness pipeline asks for.
    verdict = {
        "type": "object",
        "properties": {"verdict": {"enum": list(_VERDICT_CYCLE)}, "reason": {"type": "string"}},
    }
    return {
        "type": "object",
        "properties": {
            "claims": {"type": "array", "items": {"type": "string"}},
            "verdicts": {"type": "array", "items": verdict},
            "reason": {"type": "string"},
        },
    }


def _schema_in_prompt(text: str) -> dict[str, Any] | None:
    # Instructor's JSON mode writes the schema into the system prompt ("... json_schema:\n\n{...}").
    marker = text.find("json_schema:")
    if marker < 0:
        return None
    start = text.find("{", marker)
    try:
        found, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def reply_for(body: dict[str, Any], default_items: int) -> tuple[str, bool, str]:
    """(JSON text, as a tool call?, function name) for one chat request."""
    text = "\n".join(
        m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
        for m in body.get("messages", [])
    )
    quoted = {int(n) for n in _CLAIM_RE.findall(text)}
    n_items = len(quoted) if quoted else default_items
    schema: dict[str, Any] | None = None
    tool = False
    name = "reply"
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema, name = spec.get("schema"), spec.get("name", name)
    elif fmt.get("type") == "json_object" and isinstance(fmt.get("schema"), dict):
        schema = fmt["schema"]
    elif body.get("tools"):
        fn = body["tools"][0]["function"]
        schema, tool, name = fn.get("parameters"), True, fn.get("name", name)
    schema = schema or _schema_in_prompt(text) or _fallback_schema()
    return json.dumps(instance(schema, schema, n_items=n_items)), tool, name


def make_app(latency_s: float, default_items: int) -> web.Application:
    stats = {"requests": 0, "in_flight": 0, "peak_in_flight": 0, "tokens": 0}
    # (arrival, tokens reported) per request, for budgets measured over a sliding window (bounded).
    usage: collections.deque[tuple[float, int]] = collections.deque(maxlen=1_000_000)

    async def chat(request: web.Request) -> web.Response:
        arrived = time.time()
        body = await request.json()
        stats["requests"] += 1
        stats["in_flight"] += 1
        stats["peak_in_flight"] = max(stats["peak_in_flight"], stats["in_flight"])
        try:
            await asyncio.sleep(latency_s)
        finally:
            stats["in_flight"] -= 1
        content, tool, name = reply_for(body, default_items)
        message: dict[str, Any] = {"role": "assistant", "content": None if tool else content}
        if tool:
            message["tool_calls"] = [
                {"id": "call_1", "type": "function", "function": {"name": name, "arguments": content}}
            ]
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        tokens = max(1, prompt_chars // 4) + max(1, len(content) // 4)
        stats["tokens"] += tokens
        usage.append((arrived, tokens))
        return web.json_response(
            {
                "id": f"fake-{stats['requests']}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [
                    {"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}
                ],
                "usage": {
                    "prompt_tokens": max(1, prompt_chars // 4),
                    "completion_tokens": max(1, len(content) // 4),
                    "total_tokens": max(1, prompt_chars // 4) + max(1, len(content) // 4),
                },
            }
        )

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-judge", "object": "model"}]})

    async def stats_view(_: web.Request) -> web.Response:
        return web.json_response(stats)

    async def usage_view(_: web.Request) -> web.Response:
        return web.json_response(list(usage))

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats_view)
    app.router.add_get("/usage", usage_view)
    return app


async def _serve(latency_s: float, default_items: int, max_seconds: float) -> None:
    # A short shutdown timeout: parked requests (overhead.py's hour-long latency) must not delay the exit.
    runner = web.AppRunner(make_app(latency_s, default_items), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT {port}", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # stdin reaching EOF means the parent is gone: never outlive the benchmark that started us.
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.buffer.read1(1024) else None)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=max_seconds)
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per request (default 0.3)")
    parser.add_argument("--items", type=int, default=3, help="claims per answer (default 3)")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long")
    args = parser.parse_args()
    asyncio.run(_serve(args.latency, args.items, args.max_seconds))


if __name__ == "__main__":
    main()
