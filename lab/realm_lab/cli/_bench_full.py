"""``realm-lab bench full-length``: the page of the paper's protocol at its length."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..rows import VIEWS_MODELS
from ._args import runs_folder

MODELS = ("resnet26_gn", "mobilenetv3_bn", "vit_ln")  # the shipped Fashion-MNIST models


def add_full_length_parser(benches: Any) -> None:
    """Register ``bench full-length``."""
    p = benches.add_parser(
        "full-length",
        help="Table 1, Fig. 3, Fig. 4 and Table 4 from the runs make fmnist-full keeps",
        description="Write OUT/README.md and its figures from the run logs of "
        "`make fmnist-full` (OUT/<model> and OUT/<model>-views, kept under lab/runs/), "
        "beside the 1,000-sample table's runs (SHORT/<model>) and the paper's CIFAR-10-C "
        "row. Runs not made yet are counted, not guessed.",
    )
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--out", default="docs/fmnist-full", help="the page's folder")
    p.add_argument("--short", default="docs/fmnist", help="the 1,000-sample tables' folder")
    p.add_argument(
        "--views-models",
        nargs="*",
        default=list(VIEWS_MODELS),
        help="the models the AugMix rows (TTAug, MEMO, SFT) run on; the others' say so",
    )
    p.add_argument(
        "--doc",
        default="docs/fmnist.md",
        help=f"the page whose '{TABLES}' block gets Table 1 of each model ('' for none)",
    )
    p.add_argument(
        "--readme",
        default="README.md",
        help=f"the page whose '{HEADLINE}' block gets the headline ('' for none)",
    )
    p.set_defaults(func=run_full_length)


def run_full_length(args: argparse.Namespace) -> int:
    """Write the page; 2 where a folder holds no runs at all."""
    from realm_tools.cli import write_atomic
    from realm_tools.data import CIFAR_C_CORRUPTIONS

    from ..bench import (
        doc_tables,
        full_length_page,
        readme_headline,
        replace_block,
        write_block,
    )

    out = Path(args.out)
    runs, short = runs_folder(out), runs_folder(args.short)
    blocks = [
        (Path(path), name) for path, name in ((args.doc, TABLES), (args.readme, HEADLINE)) if path
    ]
    for path, name in blocks:  # checked before anything is written
        if not path.is_file():
            flag = "doc" if name == TABLES else "readme"
            print(
                f"{path} is not a file: give --{flag} the page to write into, or '' for none",
                file=sys.stderr,
            )
            return 2
        try:
            replace_block(path.read_text(), name, "", where=str(path))
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
    views = args.views_models
    page = full_length_page(args.models, runs, short, out, CIFAR_C_CORRUPTIONS, views)
    if "runs kept" not in page:
        print(f"no runs under {runs}: run make fmnist-full first", file=sys.stderr)
        return 2
    write_atomic(out / "README.md", HEADER + page + "\n")
    print(f"written: {out / 'README.md'}")
    for path, name in blocks:
        text = (
            doc_tables(args.models, runs, short, CIFAR_C_CORRUPTIONS, views)
            if name == TABLES
            else readme_headline(args.models, runs, CIFAR_C_CORRUPTIONS, views)
        )
        write_block(path, name, text)
        print(f"written: {path} ({name})")
    return 0


TABLES = "full-length tables"  # docs/fmnist.md's generated block
HEADLINE = "full-length headline"  # README.md's generated block


HEADER = """# Fashion-MNIST-C at the paper's length (Table 1, Fig. 3, Fig. 4, Table 4)

Written by `realm-lab bench full-length` from the runs `make fmnist-full` keeps. Each
corruption of the test split at severity 5 from the source model, batch 1, online accuracy
over the whole stream (10,000 samples: the paper's CIFAR-10-C length), mean ± std over the
stream seeds, the CIFAR preset. The rows that export ran on `RealmRuntime` (one thread); MEMO,
SFT and TTAug in the SDK. `at 1,000`: the same row's average over the first 1,000 samples
([fmnist.md](../fmnist.md)). `paper`: the REALM paper's CIFAR-10-C average, another data set:
read it for the ordering of the rows, not the figures. `ran`: stream length × seeds, backend.

"""
