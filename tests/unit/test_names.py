"""Kernel names a reader can tell apart (render/names.py, docs/outputs.md "Names"): C++ names
demangled as binutils' c++filt demangles them (LLVM's `>>` for its `> >`), clang's ROCm names that
libstdc++ refuses too, and no two distinct kernels printed alike in the
kernel table, the top compute kernels and the comm kernels, at 80 and 120 columns, on the shipped
samples and the public ROCm and CUDA traces. The expectations come from the traces' JSON (the full
names) and from c++filt, a separate program, not from the module."""

import gzip
import json
import re
import shutil
import subprocess

import pytest
from conftest import ROOT, SAMPLES, require_module

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import RENDERERS, RenderOptions
from dbo_trace.render import names as names_module
from dbo_trace.render.names import demangle, display_names

PUBLIC = ROOT / "tests" / "data" / "public"
TRACES = [
    SAMPLES / "dsv2lite-eager-prefill",
    SAMPLES / "dsv2lite-graphs-decode",
    SAMPLES / "vllm-graphs-decode",
    SAMPLES / "vllm-afd-plugins",
    SAMPLES / "two-gpu-overlap",
    PUBLIC / "hta-rocm-mi250.json.gz",
    PUBLIC / "hta-training-2rank-nccl.json.gz",
    PUBLIC / "kineto-2021-v100.json.gz",
    PUBLIC / "tracelens-mi300-resnet-ddp-2steps.json.gz",
    PUBLIC / "tracelens-vllm-piecewise-rocm.json.gz",
]
ROCM = [PUBLIC / "tracelens-mi300-resnet-ddp-2steps.json.gz", PUBLIC / "tracelens-vllm-piecewise-rocm.json.gz"]
CK_TILE = "_ZN7ck_tile6kentryILi1ENS_10MoeSortingEEEvNT0_5KargsE"  # the ROCm composable-kernel shape


def mangled_in(path):
    text = gzip.open(path, "rt").read()
    return sorted(set(re.findall(r'"name": *"(_Z[^"]+)"', text)))


@pytest.fixture(scope="module", autouse=True)
def demangler():
    require_module("pycxxfilt")  # LLVM's demangler: a dependency of dbo-trace on Python 3.11+


def binutils(names):
    """The names as binutils' c++filt prints them (no recursion limit: these names nest deep), in
    LLVM's spelling of a template's closing brackets (`>>`, where binutils writes `> >`)."""
    tool = shutil.which("c++filt")
    if tool is None:
        pytest.skip("binutils' c++filt is not installed")
    out = subprocess.run([tool, "-r"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    while any("> >" in x for x in out):
        out = [x.replace("> >", ">>") for x in out]
    return out


def test_demangled_as_binutils_cxxfilt_demangles():
    """Every mangled kernel name in the public CUDA trace (two cutlass kernels 2,000 characters long
    that differ deep inside), and a ck_tile kernel's, read as the c++filt program reads them."""
    names = mangled_in(PUBLIC / "hta-training-2rank-nccl.json.gz") + [CK_TILE]
    assert len(names) == 3
    assert [demangle(n) for n in names] == binutils(names)
    assert demangle(CK_TILE) == "void ck_tile::kentry<1, ck_tile::MoeSorting>(ck_tile::MoeSorting::Kargs)"
    assert demangle("ncclDevKernel_SendRecv") == "ncclDevKernel_SendRecv"  # not mangled: as given
    assert demangle("_Znot_a_name") == "_Znot_a_name"  # refused: as given


def test_clang_mangled_rocm_kernels_are_demangled():
    """TraceLens's MI300 ResNet DDP trace (composable-kernel convolutions, 1,600-2,000 characters,
    an anonymous namespace) and its vLLM piecewise trace (CK-tile's RMSNorm with `DF16b`, clang's
    bfloat16): libstdc++'s demangler refuses all seven; every one is read, as binutils reads them."""
    names = sorted({n for path in ROCM for n in mangled_in(path)})
    assert len(names) == 7
    shown = [demangle(n) for n in names]
    assert not [n for n in shown if n.startswith("_Z")]
    assert shown == binutils(names)
    assert any("ck_tile::kentry<1, ck_tile::Rmsnorm2dFwd<" in n for n in shown)


def test_a_hostile_mangled_name_is_shown_as_given_not_demangled():
    """LLVM's demangler recurses once per level with no limit: a name past DEMANGLE_MOST characters
    (100,000 nested pointers would overflow the stack) is not given to it."""
    deep = "_Z1f" + "P" * 100_000 + "i"
    assert demangle(deep) == deep
    assert demangle("_Z1f" + "P" * 100 + "i") == "f(int" + "*" * 100 + ")"


def test_a_launcher_templates_kernel_is_kept_in_the_brief_form():
    """CUTLASS's device_kernel<Kernel> (and flash-attention's arch guard inside it): the brief form
    keeps the kernel, where `device_kernel<...>` lost it; at 120 columns the FlashAttention kernel of
    samples/vllm-eager-decode is named in the top compute kernels and the kernel table."""
    path = next((SAMPLES / "vllm-eager-decode" / "traces").glob("*.json.gz"))
    events = json.load(gzip.open(path))["traceEvents"]
    flash = {e["name"] for e in events if e.get("cat") == "kernel" and "FlashAttnFwdSm90" in e["name"]}
    assert flash and all(n.startswith("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<") for n in flash)
    report = analyze_paths([SAMPLES / "vllm-eager-decode"], Options())
    text = RENDERERS["terminal"].render(report, RenderOptions(width=120))
    joined = re.sub(r"\n\s+", " ", text)
    assert "device_kernel<...>" not in text
    (top,) = re.findall(r"rank 0 top compute kernels: ([^\n]*)", joined)
    assert "device_kernel<FlashAttnFwdSm90<...>> x" in top
    assert re.search(r"^ device_kernel<FlashAttnFwdSm90<\.\.\.>>\s+\d+", text, re.M)
    combine = "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 5> >(int)"
    assert display_names([combine, next(iter(flash))]) == ["device_kernel<FlashAttnFwdCombine<...>>", "device_kernel<FlashAttnFwdSm90<...>>"]
    assert display_names([CK_TILE]) == ["kentry<MoeSorting>"]


def test_without_the_demangler_names_are_shown_as_given(monkeypatch):
    monkeypatch.setattr(names_module, "_DEMANGLE", None)
    names_module.demangle.cache_clear()
    names_module.levels.cache_clear()
    try:
        assert demangle(CK_TILE) == CK_TILE
        assert display_names([CK_TILE, CK_TILE + "x"], 30)[0] != display_names([CK_TILE, CK_TILE + "x"], 30)[1]
    finally:
        names_module.demangle.cache_clear()
        names_module.levels.cache_clear()


def test_the_rule_on_names_that_differ_late():
    """Four ROCm GEMM names that share 50 characters (the issue's four identical-looking rows), two
    elementwise kernels that differ only inside their template arguments, and a name twice."""
    stem = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_"
    gemms = [stem + f"MT{m}x16x32_MI16x16x1_SN_LDSB0_AFC1_{tail}" for m, tail in ((64, "K1"), (128, "K1"), (64, "K2"), (128, "K2"))]
    shown = display_names(gemms, 40)
    assert len(set(shown)) == 4 and all(len(s) <= 40 for s in shown), shown
    a = "void at::native::elementwise_kernel<128, 4, at::native::neg_kernel_cuda(at::TensorIteratorBase&)>(int, int)"
    b = "void at::native::elementwise_kernel<128, 4, at::native::abs_kernel_cuda(at::TensorIteratorBase&)>(int, int)"
    c = "void at::native::reduce_kernel<512, 1>(int)"
    assert display_names([a, b, c, a]) == [
        "elementwise_kernel<128, 4, neg_kernel_cuda(TensorIteratorBase&)>",
        "elementwise_kernel<128, 4, abs_kernel_cuda(TensorIteratorBase&)>",
        "reduce_kernel<...>",  # alone of its kind: brief
        "elementwise_kernel<128, 4, neg_kernel_cuda(TensorIteratorBase&)>",
    ]
    lam = "void k<f(at::T&)::{lambda()#3}::operator()() const::{lambda(int)#1}>(int)"  # `const::` is no qualifier
    assert display_names([lam, lam.replace("#3", "#4")])[0] == "k<f(T&)::{lambda()#3}::operator()() const::{lambda(int)#1}>"


@pytest.fixture(scope="module")
def reports():
    return {path.name: analyze_paths([path], Options()) for path in TRACES}


KERNEL_ROW = re.compile(r"^ (\S.*?)\s+(\d+)\s+\d+\.\d\d ms(?:\s+[\d.]+ us)*\s+\d+%$")


def listed(text):
    """(kernel-table names per rank, the top-compute and comm kernel lines) of a terminal report."""
    tables, lines = [], []
    blocks = text.split("\n\n")
    for block in blocks:
        if re.match(r"rank \d+ kernels: ", block):
            tables.append([m.group(1) for line in block.splitlines() if (m := KERNEL_ROW.match(line))])
    joined = re.sub(r"\n\s+", " ", text)
    lines = re.findall(r"rank \d+ (?:top compute kernels|communication kernels): ([^\n]*)", joined)
    return tables, lines


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("trace", [p.name for p in TRACES])
def test_no_two_distinct_kernels_are_printed_alike(reports, trace, width):
    report = reports[trace]
    doc = json.loads(RENDERERS["json"].render(report))
    text = RENDERERS["terminal"].render(report, RenderOptions(width=width))
    assert not re.search(r"\b_Z[A-Za-z0-9_]{8,}", text), "a mangled name is printed"
    tables, _ = listed(text)
    ranks_with_kernels = [r for r in doc["ranks"] if (r.get("kernel_summary") or {}).get("rows")]
    assert len(tables) == len(ranks_with_kernels)
    for rows, rank in zip(tables, ranks_with_kernels):
        full = [row["name"] for row in rank["kernel_summary"]["rows"][: len(rows)]]
        assert len(rows) == len(full) > 0
        assert len(set(rows)) == len(set(full)), rows  # distinct names, distinct rows
        for r, f in zip(rows, full):  # every row names its kernel: its first word is the kernel's
            assert re.match(r"\w*", r).group() in demangle(f), (r, f)
    for line in re.findall(r"rank \d+ top compute kernels: (.*)", re.sub(r"\n    ", " ", text)):
        entries = re.findall(r"(\S.*?) x\d+ \d+\.\d\d ms(?:,|$)", line)
        assert len(set(entries)) == len(entries), entries
    for line in re.findall(r"rank \d+ communication kernels: (.*)", re.sub(r"\n    ", " ", text)):
        entries = re.findall(r"(\S.*?) x\d+(?:, | and|$)", line)
        assert len(set(entries)) == len(entries), entries
