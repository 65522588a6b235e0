"""Progress on stderr for long work (reading big traces, recording). Presentation only."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from dbo_trace.errors import inert

PROGRESS_MIN_BYTES = 32 << 20  # below this a load is quick: no bar


def _console():
    from rich.console import Console

    return Console(stderr=True)


@contextmanager
def reading_bar(total: int) -> Iterator[Callable[[int], None] | None]:
    if total < PROGRESS_MIN_BYTES:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        TextColumn("reading traces"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=_console(),
        transient=True,
    ) as bar:
        task = bar.add_task("read", total=total)
        yield lambda n: bar.update(task, completed=n)


class ConsoleProgress:
    """The recorder's Progress on a terminal: one line per phase, a bar per load."""

    def __init__(self) -> None:
        self.console = _console()

    # Texts hold paths and server output: data, so a folder named `b[/]x` prints as itself and no
    # control sequence in a server's line reaches the terminal.
    def phase(self, text: str) -> None:
        from rich.text import Text

        line = Text.assemble(("dbo-trace", "bold cyan"), ": " + inert(text))
        self.console.print(line, highlight=False, soft_wrap=True, emoji=False)

    def note(self, text: str) -> None:
        from rich.text import Text

        self.console.print(Text("dbo-trace: " + inert(text), style="dim"), highlight=False, soft_wrap=True, emoji=False)

    @contextmanager
    def counter(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=self.console) as bar:
            task = bar.add_task(label, total=total)
            yield lambda n: bar.update(task, completed=n)
