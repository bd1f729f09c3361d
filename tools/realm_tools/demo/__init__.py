"""The demo (``realm demo``): a trained source model adapted on shifted streams, end to end.

The task (:func:`demo_task`) is the shipped ResNet-26-GN on Fashion-MNIST-C where the dataset
is installed, the digits model otherwise. :func:`run_demo` adapts it online with the PyTorch
reference SDK (no-adapt, Tent, ETA, REALM) on corrupted test streams;
:func:`run_runtime_demo` exports it and runs the same stream through the torch-free
``RealmRuntime``, writing the stream for the edge apps (``realm_tools.data.write_stream_folder``).
:func:`export_digits_artifacts` is the one digits export the tests use.

    >>> task, _ = demo_task()
    >>> clean, rows = run_demo(task, corruptions=["fog"])
"""

from ._run import (
    DemoRow,
    RuntimeDemo,
    export_digits_artifacts,
    format_demo,
    format_runtime_demo,
    run_demo,
    run_runtime_demo,
)
from ._task import DemoTask, demo_task, digits_task, fashion_task

__all__ = [
    "DemoRow",
    "DemoTask",
    "RuntimeDemo",
    "demo_task",
    "digits_task",
    "export_digits_artifacts",
    "fashion_task",
    "format_demo",
    "format_runtime_demo",
    "run_demo",
    "run_runtime_demo",
]
