#!/usr/bin/env bash
# Make .whl/ortgpu.tar.xz for dev/cuda_check.sh: onnxruntime-gpu for the lent GPU machine
# (Python 3.12, CUDA 13 from its torch cu130), only its sm_90 (H100/H200) kernels kept and the
# TensorRT provider, the C API library and the pure-Python tool folders left out, so that it
# travels (the wheel is 247 MB; the tree that travels may be 64 MiB). Needs PyPI. Then, with
# the device tool: run `bash dev/cuda_check.sh` carrying .whl.
set -eu
VERSION=${1:-1.30.0}
ARCH=${ARCH:-90}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$WORK" \
    "onnxruntime-gpu==$VERSION"
(cd "$WORK" && unzip -q onnxruntime_gpu-*.whl)
CAPI="$WORK/onnxruntime/capi"
python3 dev/prune_fatbin.py "$CAPI/libonnxruntime_providers_cuda.so" "$ARCH"
rm -f "$CAPI"/libonnxruntime_providers_tensorrt.so "$CAPI"/libonnxruntime.so.*
rm -rf "$WORK"/onnxruntime/{transformers,quantization,tools,datasets}
mkdir -p .whl
(cd "$WORK" && tar cf - onnxruntime onnxruntime_gpu-*.dist-info) | xz -T0 -7 >.whl/ortgpu.tar.xz
grep -qx '/.whl/' "$(git rev-parse --git-path info/exclude)" 2>/dev/null ||
    echo '/.whl/' >>"$(git rev-parse --git-path info/exclude)"
ls -l .whl/ortgpu.tar.xz
