"""Programs the tools start in a process of their own: ``python -m realm_tools.workers.<name>``.

Neither this package's ``__init__`` nor ``realm_tools``' imports anything, so a worker imports
only what it names itself. ``runtime_server`` and ``runtime_rss`` need numpy, onnxruntime and
``realm_runtime`` alone: they run in interpreters without torch (e.g. ``.venv-runtime``).

- ``runtime_server``: ``RealmRuntime`` objects timed on request, one JSON line each way
  (the other side of :class:`realm_tools.bench.ExternalRuntime`);
- ``runtime_rss``: a stream through ``RealmRuntime`` with torch unimportable; its peak RSS;
- ``torch_rss``: the same stream through the torch reference alone; its peak RSS;
- ``memory_probe``: one role's peak RSS (bare, inference, adapt skipping or updating).

The coverage worker lives beside its concept (``realm_tools.coverage._worker``): it needs
torch, and the light import this package keeps is what the workers here need.

The constants name each worker's module, for the ``python -m`` command lines that start them.
"""

RUNTIME_SERVER = f"{__name__}.runtime_server"
RUNTIME_RSS = f"{__name__}.runtime_rss"
TORCH_RSS = f"{__name__}.torch_rss"
MEMORY_PROBE = f"{__name__}.memory_probe"

__all__ = ["MEMORY_PROBE", "RUNTIME_RSS", "RUNTIME_SERVER", "TORCH_RSS"]
