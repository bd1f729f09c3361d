"""The ``realm`` command line: one module per sub-command, its flags beside its handler.

``realm demo``, ``realm keygen``, ``realm bench speed|quality|adapt|memory|export``,
``realm parity``, ``realm export`` and ``realm coverage`` each parse their flags and print
or write their results over the library functions of ``realm_tools``' subpackages;
:func:`main` assembles them (also ``python -m realm_tools``). Importing this package
imports no torch: each command imports what it needs when it runs.
"""

from ._bench_quality import QUICK_EPOCHS, QUICK_LIMIT
from ._main import build_parser, main

__all__ = ["QUICK_EPOCHS", "QUICK_LIMIT", "build_parser", "main"]
