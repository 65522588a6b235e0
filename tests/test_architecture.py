"""The import graph keeps its shape (docs/architecture.md): trace -> analysis ->
render, one way; recording and the demo apart; only the CLI, its commands and the pipeline above
them all, and nothing but the CLI above the commands. Every import counts, those inside functions too."""

import ast

import pytest
from conftest import ROOT

PACKAGE = ROOT / "dbo_trace"
# What each layer may import from dbo_trace (besides itself). Shared leaves: errors, files, bundle
# (the recording format, which both sides read), ui (progress output).
LEAVES = {"dbo_trace", "dbo_trace.errors", "dbo_trace.files", "dbo_trace.bundle"}
ALLOWED = {
    "trace": LEAVES,
    "analysis": LEAVES | {"trace"},
    "render": LEAVES | {"trace", "analysis"},
    "record": LEAVES | {"ui"},
    "demo": LEAVES | {"ui", "record", "analysis", "trace", "render", "pipeline"},
    # where cli.py sits: above everything but cli.py, which only declares the options
    "commands": LEAVES | {"ui", "record", "demo", "analysis", "trace", "render", "pipeline", "archive"},
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_of(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "dbo_trace":  # from dbo_trace import bundle
            for alias in node.names:
                is_module = (PACKAGE / f"{alias.name}.py").exists() or (PACKAGE / alias.name).is_dir()
                yield f"dbo_trace.{alias.name}" if is_module else "dbo_trace"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_upward_or_sideways_import(path):
    here = path.relative_to(ROOT).with_suffix("").parts
    layer = here[1] if len(here) > 2 else None  # a module in a sub-package: trace, analysis, render, ...
    if layer not in ALLOWED:
        return
    allowed = ALLOWED[layer]
    for module in imports_of(path):
        if not module.startswith("dbo_trace"):
            continue
        target = layer_of(module)
        ok = target == layer or module in allowed or target in allowed
        assert ok, f"{'/'.join(here)} imports {module}: {layer} may import only {sorted(allowed)}"


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_only_the_cli_imports_the_commands(path):
    """The top-level modules (the pipeline, the archive, the leaves) sit below the commands; the
    sub-packages are held by ALLOWED above, in which only "commands" itself names no command."""
    if path.name == "cli.py":
        return
    for module in imports_of(path):
        assert layer_of(module) not in ("commands", "cli"), f"{path.name} imports {module}: only cli.py uses the commands"
