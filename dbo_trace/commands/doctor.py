"""`dbo-trace doctor`: what this Python would record with."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from dbo_trace.commands.common import terminal_width
from dbo_trace.errors import inert


@dataclass(frozen=True)
class DoctorRequest:
    """doctor takes no options."""

    def checked(self) -> DoctorRequest:
        return self


def run(request: DoctorRequest) -> None:
    """Exit 1 when a check fails: something record needs is missing (docs/recording.md)."""
    from dbo_trace.record.doctor import diagnose
    from dbo_trace.render.layout import wrap

    versions, checks = diagnose()
    width = terminal_width()
    pairs = ", ".join(f"{k}\N{NO-BREAK SPACE}{v or '-'}" for k, v in versions.items())  # a name keeps its version
    lines = [line.replace("\N{NO-BREAK SPACE}", " ") for line in wrap(f"versions: {pairs}", width, rest="  ")]
    marks = {True: "ok  ", False: "FAIL", None: "info"}
    for check in checks:
        lines += wrap(f"{inert(check.name)}: {inert(str(check.detail))}", width, f"  {marks[check.ok]}  ", " " * 8)
    click.echo("\n".join(lines))
    if any(c.ok is False for c in checks):
        sys.exit(1)
