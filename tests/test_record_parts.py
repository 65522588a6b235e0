"""The pure parts of `record`: the command as run, the settings read from it, and the redaction rules."""

import json

import pytest

from dbo_trace.record.child import ChildFailed
from dbo_trace.record.environment import is_vllm_serve, serve_settings, server_url
from dbo_trace.record.recorder import ProfileWindow, child_env, prepared_command
from dbo_trace.record.redact import REDACTED, redact_argv, redact_env, redact_json, redact_text

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
    with pytest.raises(ChildFailed, match="not JSON"):
        prepared_command(SERVE + ["--profiler-config=notjson"], tmp_path, ProfileWindow())


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
