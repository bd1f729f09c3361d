"""realm_tools' surface: a subpackage per feature, a few top-level names, light workers.

The top-level names are the subpackages' own objects, imported on first use; importing
``realm_tools``, its command line or the runtime's workers loads no torch (the workers run in
interpreters that have none, ``tests/runtime/test_runtime_without_torch.py`` starts them there).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import realm_tools

SUBPACKAGES = ("bench", "cli", "coverage", "data", "demo", "models", "parity", "workers")

# Imports the modules named in argv with torch unimportable; prints the packages it loaded.
NO_TORCH = """
import importlib, importlib.abc, json, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
        return None

sys.meta_path.insert(0, NoTorch())
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("realm", "torch")))))
"""


def _loaded_without_torch(*modules: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", NO_TORCH, *modules],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_top_level_names_are_the_subpackages_own():
    public = {}
    for sub in SUBPACKAGES:
        module = importlib.import_module(f"realm_tools.{sub}")
        for name in module.__all__:
            public.setdefault(name, []).append(getattr(module, name))
    for name in realm_tools.__all__:
        assert any(getattr(realm_tools, name) is obj for obj in public.get(name, [])), name
    assert set(realm_tools.__all__) <= set(dir(realm_tools))
    with pytest.raises(AttributeError, match="no attribute 'bench_model_typo'"):
        _ = realm_tools.bench_model_typo


@pytest.mark.parametrize(
    "worker", ["realm_tools.workers.runtime_server", "realm_tools.workers.runtime_rss"]
)
def test_a_runtime_worker_loads_realm_runtime_and_itself_only(worker):
    loaded = _loaded_without_torch(worker)
    assert not [m for m in loaded if m.startswith(("torch", "realm_sdk", "realm_export"))]
    tools = [m for m in loaded if m.startswith("realm_tools")]
    assert worker in tools
    assert all(
        m in ("realm_tools", "realm_tools.workers") or m.startswith("realm_tools.workers.")
        for m in tools
    ), tools


def test_the_command_line_and_the_data_import_without_torch():
    loaded = _loaded_without_torch("realm_tools", "realm_tools.cli", "realm_tools.data")
    assert "realm_tools.cli" in loaded and "realm_tools.data" in loaded
    assert not [m for m in loaded if m.startswith(("torch", "realm_tools.models"))]
