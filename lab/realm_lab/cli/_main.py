"""The ``realm-lab`` command line: the project's own tables, one module per sub-command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from realm_tools.cli import command_parser, run_command

from ._bench_attack import add_attack_parser
from ._bench_fit import add_fit_parser
from ._bench_full import add_full_length_parser
from ._bench_quality import add_quality_parser
from ._replot import add_replot_parser
from ._train import add_train_parser


def build_parser() -> argparse.ArgumentParser:
    """The ``realm-lab`` argument parser."""
    parser = command_parser(
        prog="realm-lab",
        description=(
            "realm-tta's lab: the project's own tables and figures (accuracy under shift, "
            "long-running and endless streams, attacks) and training the models it ships. "
            "What a user runs on their own model is the `realm` command."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="the project's accuracy and attack benchmarks")
    benches = bench.add_subparsers(dest="bench", required=True)
    add_quality_parser(benches)
    add_attack_parser(benches)
    add_fit_parser(benches)
    add_full_length_parser(benches)
    add_train_parser(sub)
    add_replot_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``realm-lab`` command."""
    return run_command(build_parser(), argv)
