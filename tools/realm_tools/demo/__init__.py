"""The demo (``realm demo``): the digits source model adapted on shifted streams, end to end.

:func:`run_demo` adapts the built-in digits model online with the PyTorch reference SDK
(no-adapt, Tent, EATA, REALM) on corrupted test streams; :func:`run_runtime_demo` exports it
(:func:`export_digits_artifacts`, the one digits export the web site and the tests use too)
and runs the same stream through the torch-free ``RealmRuntime``, writing the stream for the
edge apps (:func:`write_stream_folder`).

    >>> from realm_tools.demo import format_demo, run_demo
    >>> clean, rows = run_demo(corruptions=["fog"])
"""

from ._run import (
    DemoRow,
    RuntimeDemo,
    export_digits_artifacts,
    format_demo,
    format_runtime_demo,
    run_demo,
    run_runtime_demo,
    write_stream_folder,
)

__all__ = [
    "DemoRow",
    "RuntimeDemo",
    "export_digits_artifacts",
    "format_demo",
    "format_runtime_demo",
    "run_demo",
    "run_runtime_demo",
    "write_stream_folder",
]
