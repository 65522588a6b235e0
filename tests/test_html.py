"""--html: one self-contained page, loaded in a real headless Chromium: it runs without errors, draws
the median step's timeline, and shows the verdict the JSON report gives."""

import json
import os
import re
import shutil
import subprocess

import pytest
from conftest import SAMPLES, run_cli


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found:
        return found
    if os.environ.get("DBO_TRACE_REQUIRE_BROWSER"):
        raise RuntimeError("no Chromium, but DBO_TRACE_REQUIRE_BROWSER is set (see .ci/run)")
    pytest.skip("Chromium is not installed (apt-get install chromium)")


def rendered_dom(page) -> str:
    proc = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("variant", ["overlap", "hostbound", "graph"])
def test_html_report_loads_in_a_browser_and_shows_the_verdict(tmp_path, variant):
    page = tmp_path / "report.html"
    proc = run_cli("report", str(SAMPLES / variant), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    source = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", source), "the page must need no network"
    dom = rendered_dom(page)
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-ready="1"' in body and "data-error" not in body
    expected = json.loads(run_cli("report", "--json", str(SAMPLES / variant)).stdout)
    assert f'<span id="verdict">{expected["verdict"]["label"]}</span>' in dom
    assert f'data-views="{len(expected["steps"])}"' in body
    # The script picked the median step: its row is highlighted and its title shown.
    assert dom.count('class="pick current"') == 1
    assert re.search(r'<small id="view-title">rank 0 · #\d+ step \d+', dom)  # the step's number, then its label
