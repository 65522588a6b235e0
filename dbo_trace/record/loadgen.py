"""The built-in load: random-token prompts against an OpenAI-compatible /v1/completions.

Random token ids (not text) so the input length is exact whatever the
tokenizer; `ignore_eos` so the output length is too. Daemon worker threads,
so an interrupted load never holds the process open.
"""

from __future__ import annotations

import json
import queue
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from dbo_trace.record.child import http

# Token ids drawn from here: above the special tokens of common vocabularies, below their sizes.
TOKEN_ID_RANGE = (1000, 30000)


# The signals a recording turns into an interrupt (Ctrl-C, and SIGTERM, SIGHUP, SIGQUIT: recorder.py).
_INTERRUPTING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}


def start_threads(threads: list[threading.Thread]) -> None:
    """Start the threads with the interrupting signals held until all have started: an interrupt
    raised inside Thread.start can leave a thread running whose start Python undid (its bootstrap
    then fails with a KeyError traceback on stderr). A signal held is delivered as they return."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTING)
    try:
        for t in threads:
            t.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@dataclass(frozen=True)
class LoadSpec:
    num_prompts: int = 64
    concurrency: int = 16
    input_len: int = 512
    output_len: int = 64
    seed: int = 0
    request_timeout_s: float = 600.0


@dataclass
class LoadResult:
    sent: int = 0
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    first_error: str | None = None
    latencies_s: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        lat = sorted(self.latencies_s)
        return {
            "sent": self.sent,
            "completed": self.completed,
            "failed": self.failed,
            "output_tokens": self.output_tokens,
            "duration_s": round(self.duration_s, 3),
            "output_tokens_per_s": round(self.output_tokens / self.duration_s, 1) if self.duration_s else None,
            "median_latency_s": round(lat[len(lat) // 2], 3) if lat else None,
            "first_error": self.first_error,
        }


def random_prompts(spec: LoadSpec) -> list[list[int]]:
    rng = random.Random(spec.seed)
    lo, hi = TOKEN_ID_RANGE
    return [[rng.randrange(lo, hi) for _ in range(spec.input_len)] for _ in range(spec.num_prompts)]


def served_model(base_url: str) -> str | None:
    """The first model /v1/models names; None for anything else (no reply, not JSON, nested past the
    parser's depth, no id, an id that is not a name)."""
    status, body = http("GET", f"{base_url}/v1/models")
    if status != 200:
        return None
    try:
        model = json.loads(body)["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None
    return model if isinstance(model, str) and model else None


def run_load(
    base_url: str,
    model: str,
    spec: LoadSpec,
    on_done: Callable[[LoadResult], None] | None = None,
    stop: threading.Event | None = None,
) -> LoadResult:
    """Send spec.num_prompts requests, spec.concurrency at a time; returns when all are answered or stop is set."""
    result = LoadResult()
    todo: queue.Queue[list[int]] = queue.Queue()
    for prompt in random_prompts(spec):
        todo.put(prompt)
    stop = stop or threading.Event()
    lock = threading.Lock()
    finished = threading.Event()
    remaining = [spec.num_prompts]

    def worker() -> None:
        while not stop.is_set():
            try:
                prompt = todo.get_nowait()
            except queue.Empty:
                return
            body = {
                "model": model,
                "prompt": prompt,
                "max_tokens": spec.output_len,
                "ignore_eos": True,
                "temperature": 0.0,
                "stream": False,
            }
            t0 = time.monotonic()
            try:
                status, reply = http("POST", f"{base_url}/v1/completions", body, timeout=spec.request_timeout_s)
                tokens = _completion_tokens(reply, spec.output_len) if status == 200 else 0
                error = (
                    None
                    if status == 200
                    else (f"HTTP {status}: {reply[:200].decode('utf-8', 'replace')}" if status else "no answer")
                )
            except BaseException as exc:  # a worker never dies silently: the load would wait for it forever
                status, tokens, error = -1, 0, f"load worker failed: {type(exc).__name__}: {exc}"[:300]
            elapsed = time.monotonic() - t0
            with lock:
                result.sent += 1
                if status == 200:
                    result.completed += 1
                    result.latencies_s.append(elapsed)
                    result.output_tokens += tokens
                else:
                    result.failed += 1
                    if result.first_error is None:
                        result.first_error = error
                remaining[0] -= 1
                if on_done:
                    try:
                        on_done(result)
                    except Exception:
                        pass
                if remaining[0] == 0:
                    finished.set()

    start = time.monotonic()
    start_threads([threading.Thread(target=worker, daemon=True, name="dbo-trace-load") for _ in range(max(1, min(spec.concurrency, spec.num_prompts)))])
    try:
        while not finished.wait(0.2):  # a short wait, so Ctrl-C reaches the main thread promptly
            if stop.is_set():
                break
    except BaseException:
        stop.set()  # no new requests; those in flight end with their daemon threads
        raise
    result.duration_s = time.monotonic() - start
    return result


def _completion_tokens(reply: bytes, default: int) -> int:
    """The reply's completion_tokens; the requested count where the reply says nothing sensible."""
    try:
        value = json.loads(reply)["usage"]["completion_tokens"]
        count = int(value)
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):  # 1e999 parses as inf
        return default
    return count if 0 <= count <= 10 * max(default, 1) else default


# -- the timed repeats' fallback: streamed, so that TTFT, TPOT and ITL are measured as vLLM's benchmark does --
def _stream_one(base_url: str, body: dict, timeout_s: float) -> tuple[float, float, list[float], int] | str:
    """(ttft_s, latency_s, chunk gaps in s, output tokens) of one streamed completion, or an error.

    As vLLM's benchmark reads a stream (benchmarks/lib/endpoint_request_func.py): every event that
    carries choices is a chunk, its text empty or not (a special token streams as ""); TTFT is the
    first chunk's time from the send, the latency the last chunk's (not the [DONE] after it), the
    ITL the gaps between chunks; the output tokens the usage event's completion_tokens, else the
    chunks (vLLM counts the text's tokens with the tokenizer there)."""
    import http.client as httplib
    import urllib.parse

    parts = urllib.parse.urlsplit(base_url)
    conn = httplib.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return f"HTTP {resp.status}: {resp.read(200).decode('utf-8', 'replace')}"
        ttft, last, gaps, chunks, usage = None, t0, [], 0, None
        for raw in resp:  # server-sent events, one `data: ...` line each
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                continue
            now = time.perf_counter()
            if isinstance(event, dict) and isinstance(event.get("usage"), dict):
                usage = event["usage"].get("completion_tokens")
            choices = event.get("choices") if isinstance(event, dict) else None
            if not choices or not isinstance(choices, list):
                continue
            if ttft is None:
                ttft = now - t0
            else:
                gaps.append(now - last)
            last = now
            chunks += 1
        latency = last - t0
    except (OSError, httplib.HTTPException, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    finally:
        conn.close()
    if ttft is None:
        return "the server streamed nothing"
    tokens = usage if isinstance(usage, int) and not isinstance(usage, bool) and 0 < usage <= 10 * max(chunks, 1) else chunks
    return ttft, latency, gaps, tokens


def _ms(values: list[float]) -> dict[str, float | None]:
    """Mean, median and 99th percentile in ms, as vLLM's benchmark takes them (numpy, linear percentile)."""
    import numpy as np

    if not values:
        return {"mean": None, "median": None, "p99": None}
    arr = np.asarray(values, dtype=float) * 1e3
    return {"mean": round(float(arr.mean()), 3), "median": round(float(np.median(arr)), 3), "p99": round(float(np.percentile(arr, 99)), 3)}


def run_streaming_load(base_url: str, model: str, spec: LoadSpec, abort: Callable[[], bool] | None = None) -> dict:
    """The built-in timed repeat: spec's requests, streamed, spec.concurrency at a time; the same
    fields as vLLM's benchmark saves (bench.py). abort() true (the server died) ends it at once:
    no new request, those in flight left to their daemon threads."""
    todo: queue.Queue[list[int]] = queue.Queue()
    for prompt in random_prompts(spec):
        todo.put(prompt)
    lock = threading.Lock()
    ttfts: list[float] = []
    tpots: list[float] = []
    itls: list[float] = []
    e2els: list[float] = []
    counts = {"completed": 0, "failed": 0, "tokens": 0}
    first_error: list[str] = []

    def worker() -> None:
        while True:
            try:
                prompt = todo.get_nowait()
            except queue.Empty:
                return
            if stopped.is_set():
                return
            body = {"model": model, "prompt": prompt, "max_tokens": spec.output_len, "ignore_eos": True,
                    "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
            try:
                got = _stream_one(base_url, body, spec.request_timeout_s)
            except Exception as exc:  # a worker never dies silently: its request would be lost uncounted
                got = f"load worker failed: {type(exc).__name__}: {exc}"[:300]
            with lock:
                if isinstance(got, str):
                    counts["failed"] += 1
                    first_error[:] = first_error or [got]
                    continue
                ttft, latency, gaps, tokens = got
                counts["completed"] += 1
                counts["tokens"] += tokens
                ttfts.append(ttft)
                e2els.append(latency)
                itls.extend(gaps)
                if tokens > 1:
                    tpots.append((latency - ttft) / (tokens - 1))

    stopped = threading.Event()
    start = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True, name="dbo-trace-repeat") for _ in range(max(1, min(spec.concurrency, spec.num_prompts)))]
    start_threads(threads)
    try:
        while running := [t for t in threads if t.is_alive()]:
            running[0].join(0.2)  # a short wait, so Ctrl-C reaches the main thread promptly
            if abort is not None and abort():
                stopped.set()
                break
    finally:
        stopped.set()  # Ctrl-C or SIGTERM: no new requests
    duration = time.perf_counter() - start
    with lock:  # aborted: workers still in flight must not change the lists being summarised
        out: dict = {
            "duration_s": round(duration, 3),
            "completed": counts["completed"],
            "failed": counts["failed"],
            "total_output_tokens": counts["tokens"],
            "request_throughput": round(counts["completed"] / duration, 3) if duration else None,
            "output_throughput": round(counts["tokens"] / duration, 3) if duration else None,
            "first_error": first_error[0] if first_error else None,
        }
        for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
            for stat, value in _ms(values).items():
                out[f"{stat}_{name}_ms"] = value
    return out
