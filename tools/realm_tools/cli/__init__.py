"""The ``realm`` command line: one module per sub-command, its flags beside its handler.

``realm demo``, ``realm keygen``, ``realm bench speed|adapt|memory|export``, ``realm parity``,
``realm export`` and ``realm coverage`` each parse their flags and print or write their
results over the library functions of ``realm_tools``' subpackages; :func:`main` assembles
them (also ``python -m realm_tools``). Importing this package imports no torch: each command
imports what it needs when it runs. What the commands share (:func:`command_parser`,
:func:`run_command`, :func:`progress_factory`, :func:`run_header`, :func:`write_atomic`) is
public: the lab's command uses it too.
"""

from ._common import (
    command_parser,
    progress_factory,
    run_command,
    run_header,
    write_atomic,
)
from ._main import build_parser, main

__all__ = [
    "build_parser",
    "command_parser",
    "main",
    "progress_factory",
    "run_command",
    "run_header",
    "write_atomic",
]
