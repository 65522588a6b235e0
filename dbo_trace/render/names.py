"""Kernel names a reader can tell apart: C++ names demangled by a maintained demangler, shortened by
one rule that keeps distinct names distinct, and fitted to a width with the part that tells them
apart kept (docs/outputs.md, "Names").

The rule, for the names one list shows (a kernel table, a comm kernel line):
1. demangle: an Itanium-ABI name (`_Z...`) of at most DEMANGLE_MOST characters through LLVM's
   demangler (`pycxxfilt`, installed with dbo-trace on Python 3.11+: it reads the clang-mangled
   ROCm names that libstdc++'s and binutils' demanglers refuse), else `cxxfilt` (libstdc++'s
   `__cxa_demangle`, the extra `dbo-trace[names]`); without either, or where it refuses the name,
   the name as given;
2. the name at the shortest of these levels that no other name of the list shares:
   brief (return type, argument list and namespace qualifiers left out, template arguments as
   `<...>`: `elementwise_kernel<...>`; a launcher template, whose first argument is the kernel
   (CUTLASS's `device_kernel`, CK-tile's `kentry`), keeps that argument's brief form:
   `device_kernel<FlashAttnFwdSm90<...>>`), readable (the same with the template arguments kept,
   their qualifiers left out), the demangled name, the name as given;
3. fitted to a width: a name too long is cut at the end (`...`) where what tells it from the others
   lies before the cut, else it keeps its head, `...`, and the stretch from where it first differs
   from the name most like it (a ROCm `Cijk_Alik_Bljk_..._MT64x16x32_...` keeps its `MT64x16x32`);
   names still alike keep their head and the stretch in which they differ (from the first character
   where two of them differ to the last), its middle cut where too long; names still alike after
   that get ` [2]`, ` [3]`, ... in their order.
The full names stay in the JSON, the HTML's titles and the Perfetto trace. Names only: no figure."""

from __future__ import annotations

import functools
import re
from typing import Callable, Sequence

MARK = "..."
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|\b(?!const\b|volatile\b)[A-Za-z_][A-Za-z_0-9]*)::")
_OPEN, _CLOSE = "<([{", ">)]}"


# LLVM's demangler recurses once per nesting level and has no depth limit: a hostile name of 100,000
# nested pointers overflows the stack. Kernel names seen run to about 2,000 characters.
DEMANGLE_MOST = 4096
# Launcher templates: the kernel is their first template argument (CUTLASS, flash-attention's arch
# guards, CK-tile), so their brief form keeps it.
LAUNCHERS = frozenset({"device_kernel", "enable_sm80_to_sm89", "enable_sm90_or_later", "enable_sm90", "enable_sm100", "kentry"})


def _demangler() -> Callable[[str], str | None] | None:
    try:
        import pycxxfilt  # type: ignore[import-not-found,import-untyped,unused-ignore]

        llvm: Callable[[str], str | None] = pycxxfilt.itanium_demangle
        return llvm
    except Exception:  # not installed (Python 3.10), or its library cannot load
        pass
    try:
        import cxxfilt  # type: ignore[import-not-found,import-untyped,unused-ignore]

        demangle_fn: Callable[[str], str] = cxxfilt.demangle
        return demangle_fn
    except Exception:  # not installed, or no libstdc++ to load: names as given
        return None


_DEMANGLE = _demangler()


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """An Itanium-ABI C++ name demangled (`_ZN7ck_tile6kentry...` to `void ck_tile::kentry<...>(...)`);
    any other name, and any the demangler refuses, as given."""
    if _DEMANGLE is None or not name.startswith("_Z") or len(name) > DEMANGLE_MOST:
        return name
    try:
        out = _DEMANGLE(name)
    except Exception:  # ValueError, cxxfilt.InvalidName, or a name the library cannot take
        return name
    return out if out else name


def _depths(text: str) -> list[int]:
    """Nesting depth before each character: brackets and parentheses; `<`/`>` only outside
    parentheses (inside, `(8)>(0)` is a comparison). -1 everywhere where they do not balance."""
    out: list[int] = []
    stack: list[str] = []
    for ch in text:
        out.append(len(stack))
        in_parens = "(" in stack
        if ch in "([{" or (ch == "<" and not in_parens):
            stack.append(ch)
        elif ch in ")]}" or (ch == ">" and not in_parens and stack and stack[-1] == "<"):
            if not stack or _OPEN[_CLOSE.index(ch)] != stack[-1]:
                return [-1] * len(text)
            stack.pop()
    return out if not stack else [-1] * len(text)


def _function_part(text: str) -> str:
    """The qualified name of a demangled function: its return type and argument list left out."""
    depth = _depths(text)
    if not text or depth[0] < 0:
        return text
    end = len(text)
    stripped = text.rstrip()
    for suffix in (" const", " volatile"):
        if stripped.endswith(suffix):
            stripped = stripped[: -len(suffix)]
    if stripped.endswith(")"):  # the argument list: the top-level parentheses at the end
        opens = [i for i, ch in enumerate(stripped) if ch == "(" and depth[i] == 0]
        if opens and opens[-1] > 0:
            end = opens[-1]
    head = text[:end]
    spaces = [i for i, ch in enumerate(head) if ch == " " and depth[i] == 0]
    return head[spaces[-1] + 1 :] if spaces else head


def _collapsed(text: str) -> str:
    """Every outermost template argument list as `<...>`; a launcher's (LAUNCHERS) as its first
    argument's own collapsed form, launchers inside skipped: `device_kernel<FlashAttnFwdSm90<...>>`."""
    depth = _depths(text)
    if text and depth[0] < 0:
        return text
    kernel = _launched(text, depth)
    if kernel is not None:
        return kernel
    out, skip = [], False
    for ch, d in zip(text, depth):
        if ch == "<" and d == 0:
            out.append("<" + MARK + ">")
            skip = True
        elif skip and ch == ">" and d == 1:
            skip = False
        elif not skip:
            out.append(ch)
    return "".join(out)


def _launched(text: str, depth: list[int]) -> str | None:
    """A launcher template's brief form `launcher<kernel<...>>` (its first type argument, collapsed;
    a launcher inside it, such as an arch guard, looked through), or None where text is not one."""
    opens = [i for i, (ch, d) in enumerate(zip(text, depth)) if ch == "<" and d == 0]
    if len(opens) != 1 or text[: opens[0]].strip() not in LAUNCHERS:
        return None
    args: list[str] = []
    cur: list[str] = []
    for ch, d in zip(text[opens[0] + 1 :], depth[opens[0] + 1 :]):
        if d == 1 and ch in ",>":  # the end of a top-level argument
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    kernel = next((x for x in args if x[:1].isalpha() or x[:1] == "_"), None)  # kentry<1, Kernel>: a type
    if kernel is None:
        return None
    inner = _collapsed(kernel)
    if inner.split("<", 1)[0] in LAUNCHERS and inner.endswith(">"):  # enable_sm90_or_later<Kernel<...>>
        inner = inner[inner.index("<") + 1 : -1]
    return f"{text[: opens[0]].strip()}<{inner}>"


@functools.lru_cache(maxsize=65536)
def levels(name: str) -> tuple[str, str, str, str]:
    """brief, readable, demangled, as given (the rule's step 2)."""
    full = demangle(name)
    readable = _QUALIFIER.sub("", _function_part(full)) or full
    return _collapsed(readable), readable, full, name


def _lcp(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _fit(text: str, differs_at: int, width: int) -> str:
    """text in at most width characters, keeping the character at differs_at (where it first
    differs from the name most like it)."""
    if len(text) <= width:
        return text
    if differs_at < width - len(MARK) - 2:
        return text[: width - len(MARK)] + MARK
    head = max(4, width // 3)
    room = width - head - len(MARK)
    start = max(head, differs_at - 4)
    if start + room >= len(text):  # the stretch reaches the end: no mark after it
        return text[:head] + MARK + text[len(text) - room :]
    return text[:head] + MARK + text[start : start + room - len(MARK)] + MARK


def _apart(texts: list[str], width: int) -> list[str]:
    """Names alike once fitted, each as its head, then the stretch in which the group differs (from
    the first character where any two differ to the last), its middle cut where too long."""
    first = min(_lcp(texts[0], t) for t in texts[1:])
    last = min(_lcp(texts[0][::-1], t[::-1]) for t in texts[1:])  # characters they all end with
    out = []
    for t in texts:
        end = max(first, len(t) - last)
        head = t[:first] if first <= width // 4 else t[: max(4, width // 4)] + MARK
        tail = t[end:] if len(t) - end <= width // 4 else MARK
        room = max(2 * len(MARK), width - len(head) - len(tail))
        mid = t[first:end]
        if len(mid) > room:
            half = (room - len(MARK)) // 2
            mid = mid[:half] + MARK + mid[len(mid) - (room - len(MARK) - half) :]
        out.append(head + mid + tail)
    return out


def display_names(names: Sequence[str], width: int | None = None) -> list[str]:
    """Each name as a list shows it (the module's rule): distinct names stay distinct, each at most
    width characters (no limit where None). The same name twice is shown alike."""
    distinct = list(dict.fromkeys(names))
    chosen: dict[str, str] = {}
    for level in range(4):
        forms = {n: levels(n)[level] for n in distinct if n not in chosen}
        counts: dict[str, int] = {}
        for n in distinct:  # a form another name already shows at any level counts too
            f = chosen.get(n, levels(n)[level])
            counts[f] = counts.get(f, 0) + 1
        for n, form in forms.items():
            if counts[form] == 1 or level == 3:
                chosen[n] = form
    shown = dict(chosen)
    if width is not None:
        texts = list(chosen.values())
        for n, text in chosen.items():
            differs = max((_lcp(text, o) for o in texts if o is not text), default=0)
            shown[n] = _fit(text, differs, width)
        alike: dict[str, list[str]] = {}
        for n in distinct:
            alike.setdefault(shown[n], []).append(n)
        for group in (g for g in alike.values() if len(g) > 1):  # still alike: keep where they differ
            for n, text in zip(group, _apart([chosen[n] for n in group], width)):
                shown[n] = text
    seen: dict[str, int] = {}
    for n in distinct:  # the last resort: numbered in order
        k = seen[shown[n]] = seen.get(shown[n], 0) + 1
        if k > 1:
            tag = f" [{k}]"
            base = shown[n] if width is None else shown[n][: max(1, width - len(tag))]
            shown[n] = base + tag
    return [shown[n] for n in names]
