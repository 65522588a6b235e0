"""On an AFD attention rank the exposed comm's "waiting on a dependency" is the wait for the FFN's
answer, and the report names it so (issue 54); a rank without a role keeps the general words."""

from __future__ import annotations

import re

from conftest import SAMPLES, run_cli

PAIR = SAMPLES / "afd-pair-graphs-dbo"


def exposed_line(text: str, rank: int) -> str:
    """The rank's 'exposed comm' item of the terminal report, its wrapped lines joined."""
    found = re.search(rf"- rank {rank} exposed comm .*?(?=\n  - |\n\n)", text, re.S)
    assert found, text
    return " ".join(found.group(0).split())


def test_the_attention_ranks_wait_is_named_the_ffns_answer() -> None:
    out = run_cli("report", str(PAIR)).stdout
    attention, ffn = exposed_line(out, 0), exposed_line(out, 1)
    assert "waited for the FFN's answer (the round trip's receive)" in attention
    assert "stream or event dependency" not in attention
    assert "FFN's answer" not in ffn  # the FFN's own wait is another (the attention's next send)


def test_a_rank_without_a_role_keeps_the_general_words() -> None:
    out = run_cli("report", str(SAMPLES / "overlap")).stdout  # DBO without disaggregation: no role
    line = exposed_line(out, 0)
    assert "stream or event dependency" in line and "FFN" not in line
