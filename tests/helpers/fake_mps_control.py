"""A stand-in for nvidia-cuda-mps-control: its daemon's state is a file beside CUDA_MPS_PIPE_DIRECTORY
(in PIPE-fake/: a sweep may clear the pipe folder, as a stale control pipe must be).

`-d` starts the "daemon" (the file says up); on standard input, get_server_list answers one server
while up ("Cannot find MPS control daemon process" and exit 1 while down, as the real tool does),
get_client_list SERVER the pids in the `clients` file, quit brings it down. Every call
is appended to the `calls` log, so a test sees what a sweep asked and in which order.
"""

import os
import sys
from pathlib import Path

pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
fake = pipe.parent / (pipe.name + "-fake")
state, calls, clients = fake / "state", fake / "calls", fake / "clients"
up = state.is_file() and state.read_text() == "up"
if sys.argv[1:] == ["-d"]:
    fake.mkdir(parents=True, exist_ok=True)
    state.write_text("up")
    with calls.open("a") as log:
        log.write("-d\n")
    sys.exit(0)
command = sys.stdin.read().strip()
with calls.open("a") as log:
    log.write(command + "\n")
if not up:
    print("Cannot find MPS control daemon process")
    sys.exit(1)
if command == "get_server_list":
    print("4242")
elif command.startswith("get_client_list"):
    print(clients.read_text() if clients.is_file() else "")
elif command == "quit":
    state.write_text("down")
