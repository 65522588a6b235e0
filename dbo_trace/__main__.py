"""`python -m dbo_trace`: the same command line as the dbo-trace console script."""

from dbo_trace.cli import run

if __name__ == "__main__":
    run()
