"""The README's output blocks are real: every line of a block that starts with `verdict:` is a line
of `dbo-trace report` on the sample the paragraph before it names, at 100 columns (lines the README
leaves out are marked `...`)."""

import re

import pytest
from conftest import ROOT, SAMPLES

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import RENDERERS, RenderOptions

README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"```\n(verdict: .*?)```", re.S)
SAMPLE = re.compile(r"samples/([\w-]+)|shipped `([\w-]+)` sample")


def _blocks():
    out = []
    for m in BLOCK.finditer(README):
        before = README[max(0, m.start() - 600) : m.start()]
        names = [a or b for a, b in SAMPLE.findall(before)]
        out.append((names[-1], m.group(1)))
    return out


def test_the_readme_shows_output_blocks():
    assert len(_blocks()) >= 2


@pytest.mark.parametrize("sample, block", _blocks(), ids=[name for name, _ in _blocks()])
def test_every_line_of_an_output_block_is_real_output(sample, block):
    report = analyze_paths([SAMPLES / sample], Options())
    real = RENDERERS["terminal"].render(report, RenderOptions(width=100)).splitlines()
    shown = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("...")]
    missing = [line for line in shown if line not in real]
    assert not missing, f"README lines that `report samples/{sample}` does not print: {missing[:3]}"


def test_the_setup_makes_and_activates_a_virtual_environment_before_installing():
    setup = README[README.index("## Setup") :]
    block = setup[setup.index("```bash") : setup.index("```", setup.index("```bash") + 7)]
    lines = [line.split("#")[0].strip() for line in block.splitlines()[1:]]
    first_pip = next(i for i, line in enumerate(lines) if "pip install" in line)
    before = " ".join(lines[:first_pip])
    assert "-m venv" in before and ("activate" in before), block


def test_the_readme_opens_with_what_it_is_and_the_two_setup_commands():
    """A first screen: the title, what it is, and the commands that make the environment and
    install (issue 56: setup sat at line 63, under a 55-line feature list)."""
    first = README.splitlines()[:40]
    assert first[0] == "# dbo-trace" and any("dual-batch overlap" in line for line in first[:5])
    assert any(line.startswith("python3 -m venv .venv") for line in first)
    assert any(line.startswith("pip install -e . ") for line in first)


@pytest.mark.parametrize("sample, start", [("two-gpu-overlap", "comm kernels +385%"), ("afd-eager", "27% cpu ops in afd_plugin")])
def test_the_readmes_quoted_lines_are_real_output(sample, start):
    """A line the README quotes inline (in backticks, wrapped) is what `report` prints, words joined."""
    prose = " ".join(README.split())
    quoted = prose[prose.index(f"`{start}") + 1 :]
    quoted = quoted[: quoted.index("`")]
    text = " ".join(RENDERERS["terminal"].render(analyze_paths([SAMPLES / sample], Options()), RenderOptions(width=100)).split())
    assert quoted in text


COMMAND_BLOCK = re.compile(r"```text\n\$ dbo-trace ([^\n]+)\n(.*?)```", re.S)


def _command_blocks():
    return [(m.group(1), m.group(2)) for m in COMMAND_BLOCK.finditer(README)]


def test_the_readme_shows_compare_and_the_sweep():
    shown = [args.split()[0] for args, _ in _command_blocks()]
    assert "compare" in shown and "report" in shown


@pytest.mark.parametrize("args, block", _command_blocks(), ids=[a for a, _ in _command_blocks()])
def test_every_line_of_a_command_block_is_real_output(monkeypatch, args, block):
    """A block that shows its command (`$ dbo-trace ...`): every line it shows is a line of that
    command's output at 100 columns, from the repository's root (`...` marks what it leaves out)."""
    from conftest import run_cli

    monkeypatch.setenv("COLUMNS", "100")
    proc = run_cli(*args.split(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    real = proc.stdout.splitlines()
    shown = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("...")]
    missing = [line for line in shown if line not in real]
    assert not missing, f"README lines that `dbo-trace {args}` does not print: {missing[:3]}"
