"""`dbo-trace doctor`: what this Python would record with."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from dbo_trace.errors import inert


@dataclass(frozen=True)
class DoctorRequest:
    """doctor takes no options."""

    def checked(self) -> DoctorRequest:
        return self


def run(request: DoctorRequest) -> None:
    from dbo_trace.record.doctor import diagnose

    versions, checks = diagnose()
    click.echo("versions: " + ", ".join(f"{k} {v or '-'}" for k, v in versions.items()))
    marks = {True: "ok  ", False: "FAIL", None: "info"}
    for check in checks:
        click.echo(f"  {marks[check.ok]}  {inert(check.name)}: {inert(str(check.detail))}")
    if any(c.ok is False for c in checks):
        sys.exit(1)
