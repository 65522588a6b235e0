"""A stand-in for `vllm serve`, for the record tests: speaks the endpoints `dbo-trace record` uses.

    python fake_server.py serve MODEL --port P [--profiler-config JSON]
        [--behaviour normal|die|die-wrapped|hang|ignore-sigint|die-midrun|slow] [--pidfile F] [--stats F] [--trace T]
        [--stream-delays FIRST,GAP[,DONE]] [--additional-config JSON]

Like vLLM it loads general plugins (dbo-trace's, when DBO_TRACE_DIR is set),
starts a helper process in its group (vLLM's engine core), and on
/stop_profile writes a real torch trace (--trace, copied) into
--profiler-config's torch_profiler_dir. --stats gets a JSON record of what it
was asked, written at exit.

A request with "stream": true is answered as vLLM's OpenAI server does: server-sent events, one
`data: {"choices": [{"text": ...}]}` chunk per output token, then (with stream_options.include_usage)
a chunk with only `usage`, then `data: [DONE]`. --stream-delays FIRST,GAP,DONE (seconds) makes the
timing known to a test: the k-th streamed request (k = 1, 2, ...) sleeps FIRST * (1 + (k - 1) % 2)
before its first token, GAP * (1 + i % 3) before its token i (i = 1, 2, ...), and DONE before its
[DONE] (after the last token: no part of the latency). Its token 2 streams as "" (a special token).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("serve")
p.add_argument("model")
p.add_argument("--port", type=int, required=True)
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--profiler-config")
p.add_argument("--behaviour", default="normal")
p.add_argument("--pidfile")
p.add_argument("--stats")
p.add_argument("--trace")
p.add_argument("--api-key")
p.add_argument("--stream-delays", default="0,0,0", help="FIRST,GAP,DONE seconds of a streamed reply")
p.add_argument("--additional-config", help="vLLM's; an AFD block here names this server's role")
p.add_argument("--enable-dbo", action="store_true", help="vLLM's; ignored (a sweep's dbo-on arm adds it)")
p.add_argument("--note", action="append", help="any text, ignored (a command line that holds secrets)")
p.add_argument(
    "--no-plugins", action="store_true", help="start at once: loading dbo-trace's plugin (and vLLM) took 15 s on a loaded machine"
)
args = p.parse_args()

print("INFO fake vLLM API server starting", flush=True)
STARTED_UNIX = time.time()  # when this process began (a peer must listen before it)
FIRST_S, GAP_S, DONE_S = (float(x) for x in (args.stream_delays + ",0,0").split(",")[:3])
if args.behaviour == "die":
    print("ERROR torch.OutOfMemoryError: CUDA out of memory (fake)", flush=True)
    sys.exit(1)
if args.behaviour == "die-wrapped":  # vLLM's engine core: the root cause, then 40 lines, then the wrapper's traceback
    print("(EngineCore_DP0 pid=7) ERROR [core.py:708] EngineCore failed to start.", flush=True)
    print("(EngineCore_DP0 pid=7) ERROR [core.py:708] Traceback (most recent call last):", flush=True)
    print("(EngineCore_DP0 pid=7) ERROR [core.py:708] torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are "
          "busy or unavailable (fake)", flush=True)
    for i in range(40):
        print(f"(EngineCore_DP0 pid=7) INFO shutting down worker {i}", flush=True)
    print("Traceback (most recent call last):\n  File \"api_server.py\", line 1, in <module>", flush=True)
    print("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}", flush=True)
    sys.exit(1)
if args.behaviour == "die-leaky":  # a server whose last words echo every secret it was given
    print(f"DEBUG env HF_TOKEN={os.environ.get('HF_TOKEN')} HF_HUB_PASS={os.environ.get('HF_HUB_PASS')}", flush=True)
    print(f"DEBUG args: api key {args.api_key}; Authorization: Bearer {os.environ.get('MY_BEARER')}", flush=True)
    print(f"DEBUG fetching {os.environ.get('MODEL_URL')}", flush=True)
    print('ERROR {"error": "bad key", "api_key": "' + str(args.api_key) + '"}', flush=True)
    sys.exit(1)
if args.behaviour == "die-shapes":  # last words: whatever $LEAK_LINES holds (secrets in their shapes)
    print(os.environ.get("LEAK_LINES", ""), flush=True)
    sys.exit(1)
if args.behaviour == "ignore-sigint":
    signal.signal(signal.SIGINT, signal.SIG_IGN)

# vLLM's engine core: another process of the group, which must not outlive the recording.
helper = subprocess.Popen(
    [
        sys.executable,
        "-c",
        "import signal, time\n"
        + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if args.behaviour == "ignore-sigint" else "")
        + "time.sleep(600)",
    ]
)
if args.pidfile:
    Path(args.pidfile).write_text(f"{os.getpid()}\n{helper.pid}\n")

# Like vLLM, load the general plugins (after the helper exists, so a hang test still sees its pids).
if os.environ.get("DBO_TRACE_DIR") and not args.no_plugins:
    from dbo_trace.record.plugin import register

    register()

config = json.loads(args.profiler_config) if args.profiler_config else {}
AFD = (json.loads(args.additional_config).get("afd") or {}) if args.additional_config else {}


class AfdLink:
    """An attention server's link to its FFN server: each request served sends one step over the AFD
    port and waits for the FFN's answer, as the real attention side waits for the FFN's output. A peer
    that closes the connection (the stand-in without --ffn-loop) ends the link for good."""

    def __init__(self, port: int | None) -> None:
        self.port, self.lock, self.conn, self.dead = port, threading.Lock(), None, port is None

    def step(self) -> None:
        with self.lock:
            if self.dead:
                return
            try:
                if self.conn is None:
                    self.conn = socket.create_connection(("127.0.0.1", self.port), timeout=300)
                    self.reader = self.conn.makefile("rb")
                self.conn.sendall(b"step\n")
                if not self.reader.readline():
                    raise ConnectionError("closed")
            except OSError:
                self.dead = True


afd_link = AfdLink(AFD.get("port") if AFD.get("role") == "attention" else None)
stats = {
    "requests": 0,
    "profiled_requests": 0,
    "start_profile": 0,
    "stop_profile": 0,
    "profiler_config": config,
    "max_tokens": [],
    "prompt_lens": [],
    "signals": [],
    "streamed": 0,
    "started_unix": STARTED_UNIX,
}
profiling = False
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):  # keep the log for what matters
        pass

    def _reply(self, code: int, body: dict | None = None) -> None:
        data = json.dumps(body or {}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, req: dict) -> None:
        """Server-sent events as vLLM's /v1/completions streams them (no Content-Length: the
        connection's end closes the reply, as HTTP/1.0 allows)."""
        with lock:
            stats["streamed"] += 1
            k = stats["streamed"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        n = int(req["max_tokens"])

        def event(body) -> None:
            self.wfile.write(b"data: " + (body if isinstance(body, bytes) else json.dumps(body).encode()) + b"\n\n")
            self.wfile.flush()

        for i in range(n):
            time.sleep(FIRST_S * (1 + (k - 1) % 2) if i == 0 else GAP_S * (1 + i % 3))
            text = "" if i == 2 else f" t{i}"
            event({"id": "cmpl-fake", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": None}]})
        if (req.get("stream_options") or {}).get("include_usage"):
            event({"id": "cmpl-fake", "choices": [], "usage": {"prompt_tokens": len(req["prompt"]), "completion_tokens": n}})
        time.sleep(DONE_S)
        event(b"[DONE]")
        self.close_connection = True

    def do_GET(self):
        if self.path == "/health" and args.behaviour == "trickle-health":  # a header line a second, forever
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            while True:
                self.wfile.write(b"X-Wait: 1\r\n")
                self.wfile.flush()
                time.sleep(1)
        if self.path == "/health" and args.behaviour == "garbage-health":
            self.wfile.write(b"\x00garbage that is no status line\r\n\r\n")
            return
        if self.path == "/health":
            return self._reply(503 if args.behaviour == "hang" else 200)
        if self.path == "/v1/models" and args.behaviour == "deep-models":  # nested 100,000 deep: past any parser's stack
            data = b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path == "/v1/models":
            return self._reply(200, {"data": [{"id": args.model}]})
        self._reply(404)

    def do_POST(self):
        global profiling
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/completions":
            req = json.loads(body)
            with lock:
                stats["requests"] += 1
                stats["profiled_requests"] += profiling
                stats["max_tokens"].append(req["max_tokens"])
                stats["prompt_lens"].append(len(req["prompt"]))
                n = stats["requests"]
            afd_link.step()
            if args.behaviour == "slow":
                time.sleep(0.5)
            if args.behaviour == "short-reply":  # Content-Length promises 1000 bytes, 10 arrive
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b'{"choices"')
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            if args.behaviour == "huge-tokens":
                data = b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": 1e999}}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if args.behaviour == "die-midrun" and n >= 4:
                print("ERROR engine core died (fake)", flush=True)
                helper.kill()
                os._exit(3)
            if req.get("stream"):
                return self._stream(req)
            return self._reply(200, {"choices": [{"text": "x"}], "usage": {"completion_tokens": req["max_tokens"]}})
        if self.path == "/start_profile":
            if not config.get("torch_profiler_dir"):
                return self._reply(400, {"error": "profiler not configured"})
            stats["start_profile"] += 1
            stats.setdefault("start_profile_unix", time.time())
            profiling = True
            print("INFO Profiler started.", flush=True)
            return self._reply(200)
        if self.path == "/stop_profile":
            stats["stop_profile"] += 1
            profiling = False
            if args.trace:
                dest = Path(config["torch_profiler_dir"])
                shutil.copy(args.trace, dest / "fake_rank0.pt.trace.json.gz")
            return self._reply(200)
        self._reply(404)


def on_signal(signum, frame):
    stats["signals"].append(signal.Signals(signum).name)
    raise SystemExit(0)


signal.signal(signal.SIGTERM, on_signal)
if args.behaviour != "ignore-sigint":
    signal.signal(signal.SIGINT, on_signal)
server = ThreadingHTTPServer((args.host, args.port), Handler)
server.daemon_threads = True
print(f"INFO serving {args.model} on http://{args.host}:{args.port}", flush=True)
try:
    server.serve_forever(poll_interval=0.1)
finally:
    helper.terminate()
    if args.stats:
        Path(args.stats).write_text(json.dumps(stats))
