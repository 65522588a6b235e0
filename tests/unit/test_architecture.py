"""The import graph keeps its shape (docs/architecture.md): trace -> analysis ->
render, one way; recording and the demo apart; only the CLI, its commands and the application layer
(app/: the pipeline, its Ray executor, the review archive) above them all, and nothing but the CLI above the commands; and no two modules import each other, through
any path. Every import counts, those inside functions (and under TYPE_CHECKING) too."""

import ast
import functools

import pytest
from conftest import ROOT

PACKAGE = ROOT / "dbo_trace"
# What each layer may import from dbo_trace (besides itself). Shared leaves: errors, files, bundle
# (the recording format, which both sides read), lazy (a list built when read: the analysis's step
# reports, the renderers' step blocks), redact (the secret rules the recording and the archive both
# apply), ui (progress output).
LEAVES = {
    "dbo_trace", "dbo_trace.errors", "dbo_trace.files", "dbo_trace.bundle", "dbo_trace.lazy", "dbo_trace.redact",
    "dbo_trace.sweep_folder", "dbo_trace.serve_args",
}  # fmt: skip
ALLOWED = {
    "trace": LEAVES,
    "analysis": LEAVES | {"trace"},
    "render": LEAVES | {"trace", "analysis"},
    "record": LEAVES | {"ui"},
    "demo": LEAVES | {"ui", "record", "analysis", "trace", "render", "dbo_trace.app.pipeline"},
    # where cli.py sits: above everything but cli.py, which only declares the options
    "commands": LEAVES | {"ui", "record", "demo", "analysis", "trace", "render", "app"},
    "app": set(),  # the application layer: each module by what it is (APP_ALLOWED)
}


# The top-level modules, each by what it is: a leaf imports only leaves; serve_args reads a `vllm serve`
# command line (the recording writes its settings, compare reads them back); the CLI sits above everything.
TOP_ALLOWED = {
    "__init__": set(),
    "errors": set(),
    "files": set(),
    "lazy": set(),
    "redact": set(),
    "serve_args": set(),
    "bundle": LEAVES,
    "sweep_folder": LEAVES,  # a load sweep's folder read, as bundle.py reads a bundle
    "ui": LEAVES,
    "cli": LEAVES | {"ui", "commands", "record", "demo"},
    "__main__": {"cli"},  # `python -m dbo_trace`: the console script's entry point, nothing else
}


# The application layer (app/), each module by what it is: the pipeline reads traces into the
# analysis; the Ray executor runs the pipeline's steps on Ray; the review archive packs a report's
# renderings (nothing of the recording side); the sweep archive packs a sweep's summary and its
# runs' renderings with the review archive's caps and redaction.
APP_ALLOWED = {
    "__init__": set(),
    "pipeline": LEAVES | {"trace", "analysis"},
    "ray_executor": LEAVES | {"trace", "analysis", "dbo_trace.app.pipeline"},
    "review_archive": LEAVES | {"analysis", "render"},
    "sweep_archive": LEAVES | {"analysis", "render", "dbo_trace.app.review_archive"},
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def is_module(name: str) -> bool:
    """Whether a dotted name is one of the package's modules (a file or a sub-package)."""
    path = ROOT.joinpath(*name.split("."))
    return name.startswith("dbo_trace") and (path.with_suffix(".py").exists() or (path / "__init__.py").exists())


def imports_of(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:  # from dbo_trace.analysis import classify: the module classify
                submodule = f"{node.module}.{alias.name}"
                yield submodule if is_module(submodule) else node.module
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
    if layer == "app":
        assert path.stem in APP_ALLOWED, f"{path.name}: a new module of app/; say what it may import (APP_ALLOWED)"
        allowed = APP_ALLOWED[path.stem]
    for module in imports_of(path):
        if not module.startswith("dbo_trace"):
            continue
        target = layer_of(module)
        ok = (target == layer and layer != "app") or module in allowed or target in allowed
        assert ok, f"{'/'.join(here)} imports {module}: {layer} may import only {sorted(allowed)}"


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths) -> dict[str, set[str]]:
    """Each module's imports of the package's other modules. Importing a.b runs package a's
    __init__ first, but that is not an edge a -> ...: only what a module names is."""
    graph = {module_name(p): set() for p in paths}
    for path in paths:
        here = module_name(path)
        graph[here] = {m for m in imports_of(path) if m in graph and m != here}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module (each holds at least one cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, as the modules along it."""
    start, inside = component[0], set(component)
    came_from = {start: start}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & inside):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def cycles_in(graph: dict[str, set[str]]) -> list[str]:
    return [" -> ".join(a_cycle(graph, c)) for c in strongly_connected(graph)]


def test_no_import_cycle():
    graph = import_graph(MODULES)
    cycles = cycles_in(graph)
    assert not cycles, "import cycles (move what both sides need into the lower module):\n" + "\n".join(cycles)


def test_cycle_finder_names_a_cycle():
    """The finder itself, on a made-up graph: a three-module cycle, a two-module one, and a chain."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e", "d"}}
    assert sorted(cycles_in(graph)) == ["a -> b -> c -> a", "e -> f -> e"]
    assert cycles_in({"a": {"b"}, "b": {"c"}, "c": set()}) == []


TESTS = ROOT / "tests"
# Computations written apart from the package (docs say how, the package's code is not read): they
# share no code with it, nor with the tests' builders, only the standard library and each other.
INDEPENDENT = sorted([*(TESTS / "references").rglob("*.py"), TESTS / "helpers" / "nsys_export.py"])


# compare's bootstrap is specified by numpy's seeded generator (docs/analysis.md): its reference draws
# the same resamples with it, and computes everything else by hand.
# sweep_truth's t quantile: scipy's where installed, else computed exactly by hand (the same value)
THIRD_PARTY_ALLOWED = {"compare_reference.py": {"numpy"}, "sweep_truth.py": {"scipy"}}


@pytest.mark.parametrize("path", INDEPENDENT, ids=lambda p: str(p.relative_to(TESTS)))
def test_the_independent_references_stay_self_contained(path):
    import sys

    own = {p.stem for p in INDEPENDENT} | THIRD_PARTY_ALLOWED.get(path.name, set())
    for module in imports_of(path):
        top = module.split(".")[0]
        assert top in sys.stdlib_module_names or top in own, f"tests/{path.relative_to(TESTS)} imports {module}"



def test_the_test_builders_use_no_package_code():
    """tests/helpers/traces.py reads and writes traces with json and gzip: what a test computes from its
    dicts stays independent of the reader it checks."""
    assert not [m for m in imports_of(TESTS / "helpers" / "traces.py") if m.startswith("dbo_trace")]


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_the_top_level_modules_import_only_what_they_are_for(path):
    assert path.stem in TOP_ALLOWED, f"{path.name}: a new top-level module; say what it may import (TOP_ALLOWED)"
    allowed = TOP_ALLOWED[path.stem]
    for module in imports_of(path):
        if not module.startswith("dbo_trace") or module == f"dbo_trace.{path.stem}":
            continue
        ok = module in allowed or layer_of(module) in allowed
        assert ok, f"{path.name} imports {module}: it may import only {sorted(allowed)}"


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_only_the_cli_imports_the_commands(path):
    """The top-level modules (the leaves) sit below the commands, and so does app/; the
    sub-packages are held by ALLOWED above, in which only "commands" itself names no command."""
    if path.name in ("cli.py", "__main__.py"):  # __main__ only runs cli.run
        return
    for module in imports_of(path):
        assert layer_of(module) not in ("commands", "cli"), f"{path.name} imports {module}: only cli.py uses the commands"


def test_no_sentence_is_found_by_its_text():
    """A verdict's reasons are typed (analysis/verdict/decision.py): nothing finds one by matching its words,
    neither a sentence constant compared with reasons nor a prefix test on a reason."""
    banned = {"HOST_REASON", "BORDERLINE_TEXT", "CRITERION_TEXT", "HIDDEN_COMM_TEXT"}
    for path in MODULES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                assert node.id not in banned, f"{path.relative_to(ROOT)} uses {node.id}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith":
                subject = ast.unparse(node.func.value)
                assert "reason" not in subject.lower(), f"{path.relative_to(ROOT)}: {subject}.startswith(...)"


# Sentences are written in render/ (words/verdict.py the verdict's; words/notes.py the notes, the host line and the
# cross-rank lines), from the typed figures analysis/ hands over. What analysis/ still words, by
# module: what an input fell short of, passed on as said (attribution, clocks, collective_waits,
# python_frames: a rank or a channel left out). Every other module of analysis/ writes none (the
# pictures' titles and labels are written in render/pictures/).
STILL_WORDED_IN_ANALYSIS = {"attribution.py", "clocks.py", "collective_waits.py", "python_frames.py"}
SENTENCE_WORDS = 4  # an f-string with this many words of its own is a sentence, not a label ("rank 3 compute")


def _sentences(path):
    """The f-strings of a module that are sentences (an exception's message apart: an error is not a report's text)."""
    tree = ast.parse(path.read_text())
    raised = {id(n) for r in ast.walk(tree) if isinstance(r, ast.Raise) for n in ast.walk(r)}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and id(node) not in raised:
            own = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            if len(own.split()) >= SENTENCE_WORDS:
                yield node.lineno, own


@pytest.mark.parametrize("path", sorted((PACKAGE / "analysis").rglob("*.py")), ids=lambda p: p.name)
def test_analysis_writes_no_sentence(path):
    if path.name in STILL_WORDED_IN_ANALYSIS:
        return
    found = [f"line {line}: {text!r}" for line, text in _sentences(path)]
    assert not found, f"analysis/{path.name} writes sentences (word them in render/, hand over figures): {found}"


def test_the_sentence_finder_finds_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('def f(n):\n    if n < 0:\n        raise ValueError(f"no such step as {n} here")\n'
                      '    return f"rank {n}", f"{n} steps ran past the next one"\n')  # fmt: skip
    assert [line for line, _ in _sentences(module)] == [4]


def _string_constants(paths) -> dict[str, str]:
    """Every module-level `NAME = "text"` of the given modules, by name: what a comparison against
    `NAME` (or `module.NAME`) compares with."""
    found: dict[str, str] = {}
    for path in paths:
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            value = getattr(node, "value", None)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.update((t.id, value.value) for t in targets if isinstance(t, ast.Name))
    return found


@functools.cache
def _package_constants() -> dict[str, str]:
    return _string_constants(MODULES)


def _compared_sentences(path, constants: dict[str, str]):
    """The sentence-like strings (SENTENCE_WORDS words or more) a module compares a value against,
    written out or through a constant: `==`, `!=`, `in` and `not in`, a tuple's items too."""

    def text_of(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        return constants.get(name) if name is not None else None

    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for operand in (node.left, *node.comparators):
            items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            for item in items:
                text = text_of(item)
                if text is not None and len(text.split()) >= SENTENCE_WORDS:
                    yield node.lineno, text


@pytest.mark.parametrize("path", sorted((PACKAGE / "analysis").rglob("*.py")), ids=lambda p: p.name)
def test_analysis_compares_no_value_with_a_sentence(path):
    """A kind is an Enum or a short key, never a sentence that logic matches with `==`: the words
    belong to render/, and a sentence reworded there must not change a decision."""
    constants = _package_constants()
    found = [f"line {line}: {text!r}" for line, text in _compared_sentences(path, constants)]
    assert not found, f"analysis/{path.name} compares values with sentences (make the kind an Enum): {found}"


def test_the_comparison_finder_finds_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('BASIS = "host idle over the window"\nSHORT = "window"\n'
                      'def f(t, u):\n    return t.basis == BASIS or u in (SHORT, "x") or t == "a b c d"\n')  # fmt: skip
    found = list(_compared_sentences(module, _string_constants([module])))
    assert found == [(4, "host idle over the window"), (4, "a b c d")]


# What reads a recording takes nothing from the side that makes one: report, compare and the archive
# read the bundle (bundle.py) and the command lines it holds (serve_args.py), never record/.
READERS = ("dbo_trace.commands.report", "dbo_trace.commands.compare", "dbo_trace.commands.archive", "dbo_trace.app.review_archive")


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in graph.get(todo.pop(), set()) - seen:
            seen.add(m)
            todo.append(m)
    return seen


@pytest.mark.parametrize("reader", READERS)
def test_the_readers_take_nothing_from_the_recording_side(reader):
    graph = import_graph(MODULES)
    assert reader in graph
    path = {m for m in reached(graph, reader) if m == "dbo_trace.record" or m.startswith("dbo_trace.record.")}
    assert not path, f"{reader} reaches {sorted(path)} (move what it needs into a shared module such as serve_args.py)"


def test_reached_follows_imports_through_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert reached(graph, "a") == {"b", "c"} and reached(graph, "c") == set()


# manifest.json is read by the bundle reader (bundle.py: read_manifest, typed once into a Manifest)
# and written by the recording side; sweep_folder.py reads a sweep's run manifests, bounded, as
# bundle.py reads a bundle's. Every other module takes the manifest from them.
MANIFEST_READERS = {"dbo_trace.bundle", "dbo_trace.sweep_folder"}


def _opens_a_manifest(path) -> list[int]:
    """Lines that name the manifest's file: MANIFEST_NAME, or "manifest.json" joined onto a path."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        named = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        imported = isinstance(node, ast.ImportFrom) and any(a.name == "MANIFEST_NAME" for a in node.names)
        if named == "MANIFEST_NAME" or imported:
            found.append(node.lineno)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if any(isinstance(s, ast.Constant) and s.value == "manifest.json" for s in (node.left, node.right)):
                found.append(node.lineno)
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_bundle_reader_reads_the_manifest(path):
    name = module_name(path)
    if name in MANIFEST_READERS or name.startswith("dbo_trace.record"):
        return
    lines = _opens_a_manifest(path)
    assert not lines, f"{path.relative_to(ROOT)} reads manifest.json itself (lines {lines}): take the bundle reader's Manifest"


def test_the_manifest_finder_finds_a_read(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('import json\nfrom dbo_trace.bundle import MANIFEST_NAME\n'
                      'def f(b):\n    return json.loads((b / "manifest.json").read_text())\n'
                      'members = {"manifest.json": 1}\n')  # fmt: skip
    assert _opens_a_manifest(module) == [2, 4]


def test_verdicts_are_decided_by_the_analysis_and_evidence_made_in_one_place():
    """issue 53 item 1: the data model (analysis/model.py) decides nothing (a step's verdict is the
    analysis's, handed to StepReports), and Evidence is built only in analysis/verdict/: a step's and a
    phase's by RankContext.evidence, a rank's and the run's by evidence_of."""
    model = ast.parse((PACKAGE / "analysis" / "model.py").read_text())
    imported = {a.name for n in ast.walk(model) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not imported & {"decide", "Evidence"}, imported & {"decide", "Evidence"}
    builders = set()
    for path in (PACKAGE / "analysis").rglob("*.py"):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Evidence":
                builders.add(str(path.relative_to(PACKAGE / "analysis")))
    assert builders == {"verdict/evidence_types.py", "verdict/evidence.py"}, builders


# The house's size rules (issue 53, docs/architecture.md): a newcomer reads a module in one sitting,
# finds a package's modules at a glance, and a function on one screen or two.
MODULE_LINES, DOCUMENT_MODULE_LINES, FOLDER_MODULES, FUNCTION_LINES = 800, 600, 15, 120


def test_no_module_folder_or_function_outgrows_the_house_rules():
    too_long, crowded, long_functions = [], [], []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        limit = DOCUMENT_MODULE_LINES if path.parent.name == "document" else MODULE_LINES
        if len(text.splitlines()) > limit:
            too_long.append(f"{path.relative_to(PACKAGE)} ({len(text.splitlines())} > {limit})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                long_functions.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        if len(list(folder.glob("*.py"))) > FOLDER_MODULES:
            crowded.append(str(folder.relative_to(PACKAGE.parent)))
    assert not too_long and not crowded and not long_functions, (too_long, crowded, long_functions)


def _private_names_of(path, module_alias: str) -> list[str]:
    """`alias._name` attributes read in path, alias being a module it imported (`from x import m as alias`)."""
    return sorted(
        {
            f"{node.attr} (line {node.lineno})"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == module_alias
            and node.attr.startswith("_") and not node.attr.startswith("__")
        }
    )  # fmt: skip


def test_the_sweep_records_through_the_recorders_public_steps():
    """issue 60 item 6: record/sweep.py runs one load with the steps recorder.py offers (prepare_launch,
    start_servers, bring_up, record_load, stop_servers, finish_bundle), never through a private name of it."""
    path = PACKAGE / "record" / "sweep.py"
    tree = ast.parse(path.read_text())
    aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names if a.name == "recorder"}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "dbo_trace.record.recorder" for a in n.names}
    assert aliases, "record/sweep.py no longer imports recorder as a module: update this test"
    private = [name for alias in aliases for name in _private_names_of(path, alias)] + sorted(n for n in imported if n.startswith("_"))
    assert not private, f"record/sweep.py uses recorder's private names: {private}; make the step public in recorder.py"
    called = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases}
    assert {"record_load", "start_servers", "prepare_launch"} <= called, called  # one load as record runs its one


def test_the_private_name_finder_finds_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from dbo_trace.record import recorder as rec\nrec._now()\nrec.now()\nrec.__doc__\n")
    assert _private_names_of(module, "rec") == ["_now (line 2)"]
