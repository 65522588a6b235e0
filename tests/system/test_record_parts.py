"""The pure parts of `record`: the command as run, the settings read from it, and the redaction rules."""

import json

import pytest

from dbo_trace.record.child import ChildFailed
from dbo_trace.bundle import command_afd
from dbo_trace.record.recorder import ProfileWindow, child_env, prepared_command
from dbo_trace.serve_args import afd_block, capture_sizes, is_vllm_serve, serve_settings, server_url
from dbo_trace.redact import REDACTED, redact_argv, redact_env, redact_json, redact_text

SERVE = [
    "vllm",
    "serve",
    "deepseek-ai/DeepSeek-V2-Lite",
    "--port",
    "9001",
    "--host",
    "0.0.0.0",
    "-dp",
    "2",
    "--enable-expert-parallel",
    "--enable-dbo",
    "--dbo-decode-token-threshold=32",
    "--max-num-batched-tokens",
    "8192",
    "--compilation-config",
    '{"cudagraph_mode": "FULL_DECODE_ONLY"}',
]


def test_prepared_command_points_vllms_profiler_into_the_bundle(tmp_path):
    argv = prepared_command(SERVE, tmp_path / "traces", ProfileWindow(delay_iterations=3, max_iterations=10))
    assert argv[: len(SERVE)] == SERVE and argv[-2] == "--profiler-config"
    config = json.loads(argv[-1])
    assert config == {
        "profiler": "torch",
        "torch_profiler_dir": str((tmp_path / "traces").resolve()),
        "ignore_frontend": True,
        "torch_profiler_with_stack": False,
        "delay_iterations": 3,
        "max_iterations": 10,
    }


def test_the_users_profiler_config_is_merged_not_duplicated(tmp_path):
    user = SERVE + ["--profiler-config", '{"torch_profiler_record_shapes": true, "torch_profiler_with_stack": true}']
    argv = prepared_command(user, tmp_path, ProfileWindow())
    assert argv.count("--profiler-config") == 1
    config = json.loads(argv[-1])
    assert config["torch_profiler_record_shapes"] is True and config["torch_profiler_with_stack"] is True
    assert config["profiler"] == "torch" and "max_iterations" not in config
    with pytest.raises(ChildFailed, match="not a JSON object"):
        prepared_command(SERVE + ["--profiler-config=notjson"], tmp_path, ProfileWindow())
    # JSON, but not an object to merge into (a list; nested past Python's recursion limit): one line, cut
    for value in ("[1]", "[" * 100_000):
        with pytest.raises(ChildFailed, match="not a JSON object") as told:
            prepared_command(SERVE + ["--profiler-config", value], tmp_path, ProfileWindow())
        assert len(str(told.value)) < 200


def test_settings_and_url_come_from_the_serve_flags():
    assert is_vllm_serve(SERVE) and is_vllm_serve(["/usr/bin/vllm", "serve", "m"])
    assert not is_vllm_serve(["python", "bench.py"])
    assert server_url(SERVE) == "http://127.0.0.1:9001" and server_url(["vllm", "serve", "m"]) == "http://127.0.0.1:8000"
    settings = serve_settings(SERVE)
    assert settings["dbo"] == {"enable-dbo": True, "dbo-decode-token-threshold": "32"}
    assert settings["parallel"] == {"data-parallel-size": "2", "enable-expert-parallel": True}
    assert settings["cudagraph"] == {"compilation-config": '{"cudagraph_mode": "FULL_DECODE_ONLY"}'}
    assert settings["batching"] == {"max-num-batched-tokens": "8192"}


def test_child_env_sets_the_plugin_switch_and_keeps_a_restricted_plugin_list_working(tmp_path):
    env = child_env(tmp_path, {"VLLM_PLUGINS": "other", "PATH": "/bin"})
    assert env["DBO_TRACE_DIR"] == str(tmp_path.resolve()) and env["DBO_TRACE_TRACES"] == str((tmp_path / "traces").resolve())
    assert env["VLLM_PLUGINS"] == "other,dbo_trace" and env["PATH"] == "/bin"
    assert "VLLM_PLUGINS" not in child_env(tmp_path, {})  # unset means every plugin loads: leave it so


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--api-key", "s1"], ["--api-key", REDACTED]),
        (["--hf-token=s2"], ["--hf-token=" + REDACTED]),
        (["--max-num-batched-tokens", "8192", "--tokenizer", "t"], ["--max-num-batched-tokens", "8192", "--tokenizer", "t"]),
        (["--dbo-decode-token-threshold", "32"], ["--dbo-decode-token-threshold", "32"]),
        (["https://u:p@host/x"], [f"https://{REDACTED}@host/x"]),
    ],
)
def test_redact_argv(argv, expected):
    assert redact_argv(argv) == expected


def test_redact_env_json_and_text():
    env = redact_env(
        {"HF_TOKEN": "a", "OPENAI_API_KEY": "b", "AUTH_HEADER": "c", "NCCL_DEBUG": "INFO", "PROXY": "http://me:pw@proxy:3128"}
    )
    assert env == {
        "HF_TOKEN": REDACTED,
        "OPENAI_API_KEY": REDACTED,
        "AUTH_HEADER": REDACTED,
        "NCCL_DEBUG": "INFO",
        "PROXY": f"http://{REDACTED}@proxy:3128",
    }
    assert redact_json({"load": {"output_tokens": 5}, "api_key": "x", "urls": ["s3://k:s@b/o"]}) == {
        "load": {"output_tokens": 5},
        "api_key": REDACTED,
        "urls": [f"s3://{REDACTED}@b/o"],
    }
    assert redact_text("no secret here") == "no secret here"


# Every secret shape of issue 24, item 5, as it would appear in a server's log or an error body:
# (the text, the parts of it that must not survive). Made-up values in the providers' formats.
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlcGxhbnRlZDEyMzQ1Njc4OTA"
AWS_ID, AWS_SECRET = "AKIAPLANTED234567ABC", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTED123"
PEM_BODY = ("MIIEpAIBAAKCAQEAplantedPEMbodyLINEone0123456789", "plantedPEMbodyLINEtwo0123456789abcdefABCDEF==")
SECRET_SHAPES = [
    (f"session cookie {JWT} accepted", [JWT, "c2lnbmF0dXJlcGxhbnRlZDEyMzQ1Njc4OTA"]),
    (f"credentials {AWS_ID} {AWS_SECRET}", [AWS_ID, AWS_SECRET]),
    (f"aws_secret_access_key {AWS_SECRET}", [AWS_SECRET]),
    (
        "github_pat_11PLANTED0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcd",
        ["11PLANTED0123456789"],
    ),
    ("charge with sk_live_PLANTED4eC39HqLyjWDarjtT", ["PLANTED4eC39HqLyjWDarjtT"]),
    ("maps key AIzaSyPLANTED0123456789abcdefghijklmnop in use", ["SyPLANTED0123456789abcdefghijklmnop"]),
    # A Google key right after a word character: a Python repr's escaped newline ('...\\nAIza...'),
    # a name glued to it. The rule's word boundary had let both through (issue 38).
    ("config 'maps:\\nAIzaSyPLANTED-9tSrke72PouQMnMX-a7eZSW01' loaded", ["PLANTED-9tSrke72PouQMnMX-a7eZSW0", "AIzaSy"]),
    ("GOOGLE_MAPS_AIzaSyPLANTED_9tSrke72PouQMnMX_a7eZSW01 set", ["PLANTED_9tSrke72PouQMnMX_a7eZSW0"]),
    ("non-default args: {'model': 'm', 'api_key': 'planted repr value', 'port': 8000}", ["planted repr value", "repr value"]),
    ("non-default args: {'api_key': ['plantedlist1', 'plantedlist2'], 'port': 8000}", ["plantedlist1", "plantedlist2"]),
    ("Namespace(api_key='planted namespace value', port=8000)", ["planted namespace value", "namespace value"]),
    ("GET https://bob:pl/anted@models.example/m", ["pl/anted", "anted"]),
    ("GET https://bob:planted pass@models.example/m", ["planted pass", "pass@"]),
    ("argv: vllm serve m --api-key plantedflagvalue --port 8000", ["plantedflagvalue"]),
    ("argv: vllm serve m --hf-token=plantedflagtoken", ["plantedflagtoken"]),
    (f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY[0]}\n{PEM_BODY[1]}\n-----END RSA PRIVATE KEY-----", list(PEM_BODY)),
    (f"key='-----BEGIN PRIVATE KEY-----\\n{PEM_BODY[0]}\\n{PEM_BODY[1]}\\n-----END PRIVATE KEY-----'", list(PEM_BODY)),
    (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY[0]}\n{PEM_BODY[1]}", list(PEM_BODY)),  # cut short
    (f"{PEM_BODY[0]}\n{PEM_BODY[1]}\n-----END EC PRIVATE KEY-----", list(PEM_BODY)),  # its start cut off
    ('{"error": "bad key", "api_key": "abc\\"plantedescaped value"}', ["plantedescaped", "abc"]),
    ("{'password': 'it\\'s planted'}", ["planted", "it\\'s"]),
    # A bare prose word before a colon still masks a value shaped like a credential (issue 61).
    ("key: planted0secret99 loaded", ["planted0secret99"]),
    ("auth: 'planted quoted'", ["planted quoted"]),
    ("DB_PASS=plantedpw HF_HUB_PASS: plantedhub", ["plantedpw", "plantedhub"]),
]
# Settings and messages a reviewer needs: left as they are.
NOT_SECRETS = [
    "INFO --max-num-batched-tokens 8192 --dbo-decode-token-threshold 32 loaded in 3.2 s",
    "ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "INFO Profiler started. Writing traces to /tmp/run1/traces",
    "see https://docs.vllm.ai/en/latest/ or mail me@example.com",
    # Issue 61: a table's legend (the Markdown report's keys), a torch.compile range's name, and counts
    # were masked as `key: <redacted>`, `...pass_pattern_1_data: <redacted>`, `tokens: <redacted>`.
    "<sub>key: busy: GPU busy; comm: comm kernel time; hidden: comm under compute</sub>",
    "<sub>key: of GPU time: share of kernel time</sub>",
    "<sub>key: pN: Nth percentile; p50: 50th</sub>",
    '"name": "pass.joint_graph_passes.pass_pattern_1_data: compile_id=0/1",',
    "decode tokens: 512 a step, key: 32 requests",
]


@pytest.mark.parametrize("text,secrets", SECRET_SHAPES, ids=[f"shape{i}" for i in range(len(SECRET_SHAPES))])
def test_every_secret_shape_is_masked(text, secrets):
    masked = redact_text(text)
    assert REDACTED in masked
    for secret in secrets:
        assert secret not in masked, (secret, masked)


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_what_is_not_a_secret_stays(text):
    assert redact_text(text) == text


def test_the_token_rules_name_their_source():
    from dbo_trace.redact import TOKEN_RULES

    assert len({rule for rule, _, _ in TOKEN_RULES}) == len(TOKEN_RULES)
    assert all(source.startswith(("detect-secrets", "gitleaks")) for _, _, source in TOKEN_RULES)


def test_a_json_document_stays_json_and_its_numbers_stay():
    """app/review_archive.py redacts the report's JSON text: token counts under names with TOKEN in them stay
    (null, numbers, lists of numbers), a secret value in a list is masked item by item, still JSON."""
    document = {
        "steps": [{"context_tokens": None, "generation_tokens": 512, "tokens": [256, 256]}],
        "api_key": ["plantedjsonkey1", 7],
        "note": "ok",
    }
    masked = json.loads(redact_text(json.dumps(document, indent=1)))
    assert masked["steps"] == document["steps"] and masked["note"] == "ok"
    assert masked["api_key"] == [REDACTED, 7]


# Texts a hostile server (or a kernel name in an archived report) can print, 100 kB each: a pattern
# tried at every character of a long run costs quadratic time (a URL scheme tried at each letter of
# a long word, a base64 run at each of its characters: 108 s and 269 s before the patterns were bounded).
HOSTILE_TEXTS = {
    "scheme without end": "https://a:" + "x" * 100_000,
    "private key without end": ("-----BEGIN RSA PRIVATE KEY-----" + "A" * 100_000) * 3,
    "base64 lines without end": ("A" * 64 + "\n") * 1_500,
    "open quoted pairs": '"a": "' * 16_000,
    "jwt starts": "eyJ-" * 25_000,
    "open lists": "'api_key': [" * 8_000,
    "dotted name": "a." * 50_000,
}
HOSTILE_BOUND_S = 30.0  # all of them take about 1 s on a loaded 2-core machine; before, minutes


def test_hostile_texts_are_redacted_in_linear_time():
    import subprocess
    import sys
    import time

    script = (
        "import json, sys, time\n"
        "from dbo_trace.redact import redact_text\n"
        "texts = json.load(sys.stdin)\n"
        "t0 = time.perf_counter()\n"
        "for text in texts.values():\n"
        "    redact_text(text)\n"
        "print(round(time.perf_counter() - t0, 2))\n"
    )
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(HOSTILE_TEXTS),
            capture_output=True,
            text=True,
            timeout=HOSTILE_BOUND_S,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"redacting {len(HOSTILE_TEXTS)} hostile texts took over {HOSTILE_BOUND_S} s") from None
    assert proc.returncode == 0, proc.stderr
    print(f"redacted in {proc.stdout.strip()} s ({time.monotonic() - t0:.1f} s with the interpreter's start)")


def test_an_env_prefix_is_still_vllm_serve():
    """An AFD pair's commands start `env NCCL_HOSTID=... vllm serve`: still a server, benchmarked by its vllm."""
    from dbo_trace.record.bench import tokenizer_of, vllm_executable

    argv = ["env", "NCCL_HOSTID=afd-attn", "A=b=c", "/opt/bin/vllm", "serve", "org/m", "--port", "8001"]
    assert is_vllm_serve(argv) and vllm_executable(argv) == "/opt/bin/vllm" and tokenizer_of(argv) == "org/m"
    assert server_url(argv) == "http://127.0.0.1:8001"
    assert not is_vllm_serve(["env", "X=1", "python", "bench.py"]) and vllm_executable(["env", "X=1"]) is None


def test_waiting_for_traces_ends_once_the_server_that_writes_them_has_exited(tmp_path):
    """A server that dies as its profiled load ends (after the load's own check of it) writes no trace:
    the wait for its traces ends at once, not after trace_timeout_s (300 s), and the recording fails
    with the server's exit, as a death during the load does (tests/system/test_sweep.py's die-midrun)."""
    import time

    from dbo_trace.record.recorder import _wait_for_traces

    start = time.monotonic()
    assert _wait_for_traces(tmp_path, 300.0, alive=lambda: False) is False
    assert time.monotonic() - start < 1.0
    (tmp_path / "rank0.pt.trace.json").write_text("{}")
    assert _wait_for_traces(tmp_path, 5.0, quiet_s=0.3, alive=lambda: True) is True  # a live server's settled trace


def test_the_afd_block_is_read_as_vllm_reads_the_flag():
    """One reader of --additional-config's `afd` block for the recorder and the report (serve_args.afd_block):
    the flag's last value, as vLLM's parser takes it, in either spelling; anything not an object of
    JSON, or JSON nested past Python's recursion limit (a manifest is untrusted), is no block."""
    block = '{"afd": {"role": "ffn", "port": 29700}}'
    assert afd_block(["vllm", "serve", "m", "--additional-config", block]) == {"role": "ffn", "port": 29700}
    assert afd_block(["vllm", "serve", "m", "--additional_config=" + block])["role"] == "ffn"
    first = '{"afd": {"role": "attention"}}'
    assert afd_block(["vllm", "serve", "--additional-config", first, "--additional-config", block])["role"] == "ffn"
    for value in ("{not json", "[1]", '{"afd": [1]}', '{"afd": "ffn"}', "[" * 200_000, '{"a":' * 5_000 + "1" + "}" * 5_000):
        assert afd_block(["vllm", "serve", "m", "--additional-config", value]) is None
    assert command_afd(["vllm", "serve", "--additional-config", block]) == {"role": "ffn", "port": 29700}
    assert command_afd("vllm serve") is None and command_afd(["vllm", 3]) is None
    assert capture_sizes({"cudagraph": {"compilation-config": "[" * 200_000}}) is None
