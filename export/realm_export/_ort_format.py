"""ORT-format copies of the portable graphs, for ONNX Runtime's mobile and reduced builds.

ONNX Runtime's own converter (``python -m onnxruntime.tools.convert_onnx_models_to_ort``)
writes each graph in the ORT format, the flatbuffer that a minimal ONNX Runtime build loads
without an ONNX parser, and ``required_operators.config``, the operator list that a
reduced-size build takes (``build.sh --minimal_build --include_ops_by_config <file>``). This
module only runs that tool and collects what it writes; it converts nothing itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from realm_runtime.contract import ORT_OPERATORS_CONFIG

from ._errors import UnsupportedModelError

# The converter's guidance for apps on the CPU execution provider ("Runtime" is for NNAPI and
# CoreML, which take an unknown share of the nodes).
OPTIMIZATION_STYLE = "Fixed"
# Phones and tablets: no x86-only layout (NCHWc) is baked into the graphs, so x86 loads them
# too (the tests do), at x86 speeds a little below the .onnx files'.
TARGET_PLATFORM = "arm"
CONVERTER = "onnxruntime.tools.convert_onnx_models_to_ort"


class OrtFormatError(UnsupportedModelError):
    """ONNX Runtime's converter could not write the ORT-format graphs."""


def ort_name(onnx_name: str) -> str:
    """``step_model.onnx`` → ``step_model.ort`` (the converter's naming)."""
    return str(Path(onnx_name).with_suffix(".ort"))


def write_ort_format(
    directory: Path, files: Sequence[str], external_data: Sequence[str] = ()
) -> dict[str, str]:
    """Convert ``files`` (ONNX graphs in ``directory``) to ORT format beside them.

    ``external_data`` names the files in ``directory`` that the graphs' external data lives
    in; the ORT-format graphs embed it.

    Also writes :data:`ORT_OPERATORS_CONFIG`, with the converter's own header comments naming
    the graphs by file name (it writes the absolute paths of its scratch copies).

    Returns:
        Each given file name → its ``.ort`` file name, and ``"operators_config"`` → the
        operator configuration's file name.

    Raises:
        OrtFormatError: the converter is missing (no onnxruntime with its ``tools``) or
            failed; the message ends with its last lines of output.
    """
    with tempfile.TemporaryDirectory(prefix=".ort-format-", dir=directory) as scratch:
        source, target = Path(scratch) / "onnx", Path(scratch) / "ort"
        source.mkdir()
        for name in (*files, *external_data):
            _link_or_copy(directory / name, source / name)
        command = [
            sys.executable,
            "-m",
            CONVERTER,
            str(source),
            "--output_dir",
            str(target),
            "--optimization_style",
            OPTIMIZATION_STYLE,
            "--target_platform",
            TARGET_PLATFORM,
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
            raise OrtFormatError(
                f"ONNX Runtime's ORT-format converter ({CONVERTER}) failed with exit code "
                f"{done.returncode}:\n{tail}"
            )
        written = {}
        for name in files:
            converted = target / ort_name(name)
            if not converted.is_file():
                raise OrtFormatError(f"the ORT-format converter wrote no {converted.name}")
            shutil.move(str(converted), directory / converted.name)
            written[name] = converted.name
        config = target / ORT_OPERATORS_CONFIG
        if not config.is_file():
            raise OrtFormatError(f"the ORT-format converter wrote no {ORT_OPERATORS_CONFIG}")
        text = config.read_text(encoding="utf-8").replace(f"{target}{os.sep}", "")
        (directory / ORT_OPERATORS_CONFIG).write_text(text, encoding="utf-8")
        written["operators_config"] = ORT_OPERATORS_CONFIG
    return written


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # the graphs can be hundreds of MB: no copy where the disk allows
    except OSError:
        shutil.copy2(src, dst)
