"""Local judge process management without the model: state files, locks, probes and start-up failures."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from _loopback import serve_in_background
from faithtrace import LocalJudgeError
from faithtrace.judge.local import endpoint as local
from faithtrace.judge.local import llama_speed
from faithtrace.judge.local import process as _server
from faithtrace.judge.local.endpoint import ensure_local_judge, local_judge_status, stop_local_judge
from faithtrace.judge.local.model import ensure_bundled_model, file_lock
from faithtrace.judge.local.server import STATE_VERSION, write_state

# The in-process model's threads, prompt and decode alike (llama-cpp-python's batch threads default to every
# core): llama.cpp's threads spin at each barrier, and beside the other test worker a second one mostly waits
# for a core (process.n_threads says the same of the server). Patched and unpatched run alike either way.
_THREADS = 1


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAITHTRACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FAITHTRACE_LOCAL_MODEL_PATH", raising=False)
    return tmp_path / "cache"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _state(pid: int, port: int) -> dict[str, object]:
    return {
        "version": STATE_VERSION, "pid": pid, "host": "127.0.0.1", "port": port,
        "model_path": "/nowhere.gguf", "alias": local.LOCAL_MODEL_ALIAS, "started_at": 1.0,
    }  # fmt: skip


class _Foreign(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def foreign_server() -> Iterator[int]:
    """Some other program answering HTTP on a loopback port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    serve_in_background(server)
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_probe_rejects_closed_ports_and_other_programs(foreign_server: int) -> None:
    assert _server.probe(foreign_server, local.LOCAL_MODEL_ALIAS, timeout_s=2) is False
    closed = _server.free_port()
    assert _server.probe(closed, local.LOCAL_MODEL_ALIAS, timeout_s=2) is False


def test_free_port_prefers_the_previous_port_when_free() -> None:
    port = _server.free_port()
    assert _server.free_port(preferred=port) == port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert _server.free_port(preferred=taken) != taken


def test_no_state_means_no_status_and_nothing_to_stop(cache: Path) -> None:
    assert local_judge_status() is None
    assert stop_local_judge() is False


def test_stale_state_with_dead_pid_is_reported_unhealthy(cache: Path, foreign_server: int) -> None:
    p = _server.paths()
    write_state(p.state, _state(_dead_pid(), foreign_server))
    status = local_judge_status()
    assert status is not None
    assert status["alive"] is False
    assert status["healthy"] is False
    assert _server.healthy_from_state(p, local.LOCAL_MODEL_ALIAS) is None


def test_state_pointing_at_a_foreign_live_process_is_not_trusted_nor_killed(
    cache: Path, foreign_server: int
) -> None:
    # This test process is alive and answers nothing of ours: a recycled pid must never be killed.
    p = _server.paths()
    write_state(p.state, _state(os.getpid(), foreign_server))
    assert _server.is_our_server(os.getpid()) is False
    assert _server.healthy_from_state(p, local.LOCAL_MODEL_ALIAS) is None
    assert stop_local_judge() is False
    assert not p.state.exists()


def test_corrupt_state_file_is_ignored(cache: Path) -> None:
    p = _server.paths()
    p.directory.mkdir(parents=True)
    p.state.write_text("{not json")
    assert local_judge_status() is None


def test_failed_start_replaces_stale_state_and_shows_the_log(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("llama_cpp")
    bogus = tmp_path / "broken.gguf"
    bogus.write_bytes(b"GGUF" + b"\xff" * 4096)  # the right magic, then garbage: llama.cpp cannot load it
    monkeypatch.setenv("FAITHTRACE_LOCAL_MODEL_PATH", str(bogus))
    p = _server.paths()
    write_state(p.state, _state(os.getpid(), _server.free_port()))
    with pytest.raises(LocalJudgeError) as info:
        ensure_local_judge()
    message = str(info.value)
    assert "exited during start-up" in message
    assert str(p.log) in message
    assert "Failed to load model" in message  # the log's own lines are part of the error
    assert not p.state.exists()  # the stale record was cleared and nothing new registered


def test_missing_runtime_names_the_install_command(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_RUNTIME_MODULES", ("faithtrace_no_such_runtime",))
    with pytest.raises(LocalJudgeError, match=r"pip install 'faithtrace\[local\]'"):
        ensure_local_judge()


def test_missing_model_parts_fail_before_any_process_starts(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faithtrace.judge.local import model as _model

    monkeypatch.setattr(_model, "PART_MODULE", "faithtrace_no_such_model_part{}")
    with pytest.raises(LocalJudgeError, match="not installed"):
        ensure_local_judge()
    assert not _server.paths().state.exists()


def test_held_lock_times_out_with_a_message(cache: Path) -> None:
    p = _server.paths()
    with file_lock(p.lock, 5, "testing"):
        holder_done = threading.Event()
        errors: list[str] = []

        def contender() -> None:
            try:
                with file_lock(p.lock, 0.3, "starting the local judge"):
                    pass
            except LocalJudgeError as exc:
                errors.append(str(exc))
            holder_done.set()

        t = threading.Thread(target=contender)
        t.start()
        assert holder_done.wait(30)
        t.join()
    assert len(errors) == 1
    assert "starting the local judge" in errors[0]
    assert str(p.lock) in errors[0]


def test_state_files_are_per_network_namespace(cache: Path) -> None:
    p = _server.paths()
    ns = os.readlink("/proc/self/ns/net") if os.path.exists("/proc/self/ns/net") else ""
    digits = "".join(c for c in ns if c.isdigit())
    assert p.state.name == (f"server-{digits}.json" if digits else "server.json")
    assert p.state.parent == cache / "judge"


def test_server_env_bypasses_proxies_for_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "example.com")
    monkeypatch.setenv("CONFIG_FILE", "/etc/some-llama-config.yaml")
    env = _server.server_env()
    assert env["NO_PROXY"].split(",") == ["example.com", "127.0.0.1", "localhost"]
    assert "CONFIG_FILE" not in env


def test_state_record_round_trips(cache: Path) -> None:
    p = _server.paths()
    write_state(p.state, _state(123, 4567))
    record = _server.read_state(p)
    assert record is not None
    assert record["port"] == 4567
    p.state.write_text(json.dumps({**_state(1, 2), "version": 999}))
    assert _server.read_state(p) is None


def test_old_files_of_other_namespaces_are_pruned(cache: Path) -> None:
    p = _server.paths()
    p.directory.mkdir(parents=True)
    old = [p.directory / "server-111.lock", p.directory / "server-111.log"]
    registered = [p.directory / "server-222.json", p.directory / "server-222.log"]
    fresh = p.directory / "server-333.log"
    for f in [*old, *registered, fresh]:
        f.write_text("x")
    for f in [*old, *registered]:
        os.utime(f, (1.0, 1.0))
    _server._prune_other_namespaces(p)
    assert [f.exists() for f in old] == [False, False]
    assert all(f.exists() for f in registered)
    assert fresh.exists()


def test_loopback_bypasses_a_configured_proxy(monkeypatch: pytest.MonkeyPatch, foreign_server: int) -> None:
    import httpx

    for var in ("ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    # Set (not deleted) so that monkeypatch restores them after the function under test changed them.
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.setenv("no_proxy", "")
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{_server.free_port()}")  # a proxy that is down
    url = f"http://127.0.0.1:{foreign_server}/"
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=5)
    local.bypass_proxy_for_loopback()
    assert httpx.get(url, timeout=5).status_code == 200
    assert "127.0.0.1" in os.environ["no_proxy"].split(",")


def test_no_proxy_is_left_alone_without_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in local._PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "example.com")
    monkeypatch.setenv("no_proxy", "example.com")
    local.bypass_proxy_for_loopback()
    assert os.environ["NO_PROXY"] == "example.com"


def test_row_logprobs_equal_the_whole_array_call_row_by_row() -> None:
    # The judge server normalises only the rows llama-cpp-python reads; each must equal the whole-array call.
    np = pytest.importorskip("numpy")
    llama = pytest.importorskip("llama_cpp")
    whole = llama.Llama.logits_to_logprobs
    logits = np.random.default_rng(0).normal(size=(7, 4096)).astype(np.single) * 8
    logits[3, :] = -np.inf
    logits[3, 5] = 2.0
    rows = llama_speed._RowLogprobs(logits, whole)
    expected = whole(logits)
    assert len(rows) == 7
    tail = rows[4:]
    assert len(tail) == 3
    for got, want in zip(tail, expected[4:], strict=True):
        assert np.array_equal(got, want)
    assert np.array_equal(rows[3], expected[3], equal_nan=True)
    assert [np.array_equal(r, w) for r, w in zip(rows, expected, strict=True)] == [True] * 7


@pytest.mark.judge
def test_last_row_eval_gives_the_completion_the_same_tokens_and_log_probabilities() -> None:
    # The judge server computes logits for the last token of each batch only; a completion's tokens and their
    # log-probabilities must be what llama-cpp-python's own eval gives, prompt split over several batches.
    llama = pytest.importorskip("llama_cpp")
    model = str(ensure_bundled_model())
    prompt = (
        "Document: The quarterly meeting is held on Tuesday in room 4. Lunch is served at noon.\n"
        "Claim: The quarterly meeting is held on Friday.\nIs the claim stated in the document? Answer:"
    )
    outputs = []
    for patched in (False, True):
        llm = llama.Llama(
            model, n_ctx=512, n_batch=16, n_threads=_THREADS, n_threads_batch=_THREADS, logits_all=True,
            seed=1, verbose=False,
        )  # fmt: skip
        if patched:
            llm.eval = types.MethodType(llama_speed.eval_last_logits, llm)
            guarded = llama_speed.refuse_prompt_logprobs(llama.Llama._create_completion)
            llm._create_completion = types.MethodType(guarded, llm)
        out = llm.create_completion(prompt, max_tokens=6, temperature=0.0, logprobs=5)
        outputs.append(out["choices"][0])
        if patched:
            # The prompt's own rows were never computed: asking for them is refused, not answered wrongly.
            with pytest.raises(ValueError, match="echo with logprobs"):
                llm.create_completion(prompt, max_tokens=1, echo=True, logprobs=1)
            assert llm.create_completion(prompt, max_tokens=1, echo=True)["choices"][0]["text"].startswith(
                prompt
            )
        llm.close()
    want, got = outputs
    assert got["text"].strip()
    assert got["text"] == want["text"]
    assert got["logprobs"]["tokens"] == want["logprobs"]["tokens"]
    for g, w in zip(got["logprobs"]["top_logprobs"], want["logprobs"]["top_logprobs"], strict=True):
        assert set(g) == set(w)
        assert all(abs(g[k] - w[k]) < 1e-3 for k in w)


def test_top_pairs_equal_llama_cpp_pythons_sort_ties_and_infinities_included() -> None:
    # llama-cpp-python sorts every (logprob, token) pair of a row and reads the first top_logprobs (<= 20);
    # the judge server ranks the row in numpy. Same pairs, same order; ties by token id, as tuples sort.
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(1)
    rows = [
        rng.normal(size=5000).astype(np.single),
        np.round(rng.normal(size=5000), 1).astype(np.single),  # many ties, across the 20th place too
        np.full(30, -np.inf, dtype=np.single),
        np.array([0.5, -np.inf, 0.5, 2.0], dtype=np.single),  # shorter than 20
    ]
    rows[0][[7, 4000, 12]] = rows[0].max() + 1  # a tie at the top
    for row in rows:
        pairs = llama_speed._zip(row, range(len(row)))
        assert isinstance(pairs, llama_speed._RankedPairs)
        want = sorted(zip(row, range(len(row)), strict=True), reverse=True)[:20]
        got = llama_speed._top_pairs(pairs, reverse=True)
        assert [(float(v), i) for v, i in got] == [(float(v), i) for v, i in want]
        assert [type(v) for v, _ in got] == [type(v) for v, _ in want]
    # A NaN row, or pairs already partly read, are sorted as they come.
    nan = np.array([np.nan, 1.0, 0.0], dtype=np.single)
    assert [i for _, i in llama_speed._top_pairs(llama_speed._zip(nan, range(3)), reverse=True)] == [
        i for _, i in sorted(zip(nan, range(3), strict=True), reverse=True)
    ]
    started = llama_speed._zip(rows[3], range(4))
    next(started)
    assert [i for _, i in llama_speed._top_pairs(started, reverse=True)] == [3, 2, 1]


def test_other_zips_and_sorts_are_left_as_they_are() -> None:
    np = pytest.importorskip("numpy")
    assert list(llama_speed._zip([1, 2], "ab")) == [(1, "a"), (2, "b")]
    with pytest.raises(ValueError, match="shorter"):
        list(llama_speed._zip([1, 2], [3], strict=True))
    row = np.arange(4, dtype=np.single)
    assert not isinstance(llama_speed._zip(row, range(3)), llama_speed._RankedPairs)
    assert llama_speed._top_pairs([3, 1, 2]) == [1, 2, 3]
    assert llama_speed._top_pairs([(1, 1), (0, 9)], key=lambda p: p[1]) == [(1, 1), (0, 9)]


@pytest.mark.judge
def test_judge_server_patches_give_llama_cpp_pythons_own_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every change the judge server makes to llama-cpp-python (faster log-probabilities, the grammar checked
    # on the best token first) must leave a reply as llama-cpp-python's own code writes it: a verdict reply
    # as faithtrace asks for one (JSON schema grammar, top-5 log-probabilities, temperature 0, the server's
    # repeat penalty), and a sampled reply without a grammar, which keeps llama.cpp's own sampler.
    llama = pytest.importorskip("llama_cpp")
    from faithtrace.scoring import prompts, steps

    # Two claims, one with a focus term and one without: ~30 output tokens, each ~0.4 s through
    # llama-cpp-python's own grammar code on one thread.
    claims = ["The quarterly meeting is held on Friday.", "Lunch is served at noon."]
    evidence = ["The quarterly meeting is held on Tuesday in room 4, and lunch is served at noon."] * 2
    messages = prompts.focus_verdict_messages(claims, evidence, [["Friday"], []])
    schema = steps._verdicts_reply(2).model_json_schema()
    model = str(ensure_bundled_model())
    replies = []
    for patched in (False, True):
        if patched:
            for target, name, value in llama_speed.patches():
                monkeypatch.setattr(target, name, value, raising=False)
        llm = llama.Llama(
            model, n_ctx=1024, n_threads=_THREADS, n_threads_batch=_THREADS, logits_all=True, seed=7,
            verbose=False,
        )  # fmt: skip
        verdicts = llm.create_chat_completion(
            messages=messages,
            temperature=0.0,
            repeat_penalty=1.1,
            max_tokens=80,
            response_format={"type": "json_object", "schema": schema},
            logprobs=True,
            top_logprobs=5,
        )
        sampled = llm.create_completion("The capital of France is", max_tokens=8, temperature=0.8, seed=3)
        replies.append((verdicts["choices"][0], sampled["choices"][0]["text"]))
        llm.close()
    (want, want_sampled), (got, got_sampled) = replies
    assert json.loads(got["message"]["content"])["verdicts"][1]["claim"] == 2
    assert got["message"]["content"] == want["message"]["content"]
    assert got_sampled == want_sampled
    assert len(got["logprobs"]["content"]) == len(want["logprobs"]["content"]) > 20
    for g, w in zip(got["logprobs"]["content"], want["logprobs"]["content"], strict=True):
        assert g["token"] == w["token"]
        assert [t["token"] for t in g["top_logprobs"]] == [t["token"] for t in w["top_logprobs"]]
        assert all(
            abs(a["logprob"] - b["logprob"]) < 1e-3
            for a, b in zip(g["top_logprobs"], w["top_logprobs"], strict=True)
        )
