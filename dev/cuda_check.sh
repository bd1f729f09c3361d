#!/usr/bin/env bash
# The CUDA execution provider on a lent GPU machine: every test marked cuda (the adapt graph
# and RealmRuntime with its state on the GPU, the onnx backend, parity cases), then with
# SPEED=1 dev/cuda_speed.py (step and predict against the SDK on CUDA torch, node placement). onnxruntime-gpu 1.30 is built for CUDA 13, the libraries of the
# image's torch cu130; its 247 MB wheel travels as .whl/ortgpu.tar.xz, made here by
# dev/pack_ortgpu.sh (only the sm_90 kernels kept: 56 MiB). Run from the repository root.
set -u
OUT=${OUT:-/tmp/realm-cuda-check}
mkdir -p "$OUT"
SITE=/tmp/ortgpu
mkdir -p "$SITE" && tar xJf .whl/ortgpu.tar.xz -C "$SITE" || exit 1
PYSITE=$(python3 -c 'import site; print(site.getsitepackages()[0])')
LIBS=$(ls -d "$PYSITE"/nvidia/*/lib "$PYSITE"/nvidia/*/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$SITE:$PWD/sdk:$PWD/export:$PWD/runtime:$PWD/tools" PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    lscpu | grep -E "Model name|^CPU\(s\)"
    python3 - <<'PYEOF'
import numpy as np, onnx, onnxruntime as ort, torch
print("onnxruntime", ort.__version__, ort.__file__, ort.get_available_providers())
print("torch", torch.__version__, "onnx", onnx.__version__)
from onnx import helper, TensorProto
g = helper.make_graph([helper.make_node("Add", ["a", "a"], ["b"])], "g",
    [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4])],
    [helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
s = ort.InferenceSession(m.SerializeToString(), providers=["CUDAExecutionProvider"])
print("session providers", s.get_providers(), s.run(None, {"a": np.ones(4, np.float32)})[0])
PYEOF
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
WORK=$(mktemp -d)
if [ "${MODE:-tests}" = parity ]; then  # MODE=parity: the fast tier on the CUDA provider instead
    group() {  # name, cases...: the SDK on CPU torch, RealmRuntime(device="cuda", backend="onnx")
        local name=$1; shift
        OMP_NUM_THREADS=4 timeout "${PARITY_TIMEOUT:-200}" python3 -m realm_tools parity \
            --device cuda --backend onnx --no-progress --cases "$@" --out "$WORK/parity-$name" \
            >"$WORK/parity-$name.log" 2>&1
        echo "parity group $name: rc $?"
    }
    group digits-a digits-cifar-realm digits-imagenet-realm digits-imagenet-preset \
        digits-cifar-tent &
    group digits-b digits-cifar-eata digits-imagenet-eata digits-cifar-bounds \
        digits-imagenet-bounds &
    group resnet resnet18_bn-cifar resnet18_bn-imagenet &
    group convnext convnext_atto-cifar convnext_atto-imagenet &
    group swin swin_small_cfg-cifar swin_small_cfg-imagenet-tent &
    wait
    cat "$WORK"/parity-*.md >"$OUT/parity-cuda-ep.md"  # the device tool returns 8 files at most
    tail -n 30 "$WORK"/parity-*.log >"$OUT/parity-logs.txt"
    grep -h "| onnx |" "$OUT/parity-cuda-ep.md"
    exit 0
fi
# Every CUDA test: the adapt graph (docs client and RealmRuntime, state on the GPU) against
# the CPU twin, the onnx backend against the SDK, and the fast parity cases on CUDA.
timeout "${TEST_TIMEOUT:-420}" python3 -m pytest -p no:cacheprovider -q -rA -m cuda -n 4 \
    tests/test_adapt_graph.py tests/test_portable.py tests/test_runtime.py tests/test_parity.py \
    >"$OUT/pytest.txt" 2>&1
echo "pytest rc $?"
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$OUT/pytest.txt" | tail -40
if [ "${SPEED:-0}" = 1 ]; then
    OMP_NUM_THREADS=8 timeout 330 python3 dev/cuda_speed.py "$OUT/speed.json" \
        resnet50_gn convnext_tiny vit_base_patch16_224 >"$OUT/speed.txt" 2>&1
    echo "speed rc $?"
    grep -v "^W1\|Warning\|warn" "$OUT/speed.txt" | tail -12
fi
