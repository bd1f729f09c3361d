"""The ``realm`` command line: one sub-command per module of this package, assembled here."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ._bench_adapt import add_adapt_parser
from ._bench_export import add_export_time_parser
from ._bench_memory import add_memory_parser
from ._bench_profile import add_profile_parser
from ._bench_speed import add_speed_parser
from ._common import command_parser, run_command
from ._coverage import add_coverage_parser
from ._demo import add_demo_parser
from ._export import add_export_parser
from ._fit import add_fit_parser
from ._keygen import add_keygen_parser
from ._parity import add_parity_parser


def build_parser() -> argparse.ArgumentParser:
    """The ``realm`` argument parser."""
    parser = command_parser(
        prog="realm",
        description=(
            "realm-tta: REALM test-time adaptation on your own model. Export it to on-device "
            "artifacts, run the demo, check parity with the reference, measure its speed, "
            "memory and export time, map which models export, make signing keys."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_demo_parser(sub)
    add_keygen_parser(sub)
    bench = sub.add_parser(
        "bench", help="the speed, memory and export time of a model's adaptation"
    ).add_subparsers(dest="bench", required=True)
    add_speed_parser(bench)
    add_adapt_parser(bench)
    add_profile_parser(bench)
    add_memory_parser(bench)
    add_export_time_parser(bench)
    add_parity_parser(sub)
    add_export_parser(sub)
    add_fit_parser(sub)
    add_coverage_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``realm`` command."""
    return run_command(build_parser(), argv)
