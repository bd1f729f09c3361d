#!/usr/bin/env bash
# What a lent GPU machine can check (issue 11): it has Python 3.12, CUDA torch, timm,
# onnxscript and a CPU-only onnxruntime, no onnxruntime-training, and no onnxruntime-gpu (its
# wheel is far over what travels; dev/pack_ortgpu.sh + dev/cuda_check.sh bring a pruned one).
# So: export on that machine's torch/onnx versions, the portable runtime on its onnxruntime,
# and parity against the SDK reference running on CUDA torch; then the SDK's updating step
# on the GPU and the CPU speed table. Run from the repository root; figures go to $OUT.
set -u
OUT=${OUT:-/tmp/realm-device-check}
WORK=$(mktemp -d)  # logs and JSON; $OUT gets a few summary files (the device tool returns 8)
mkdir -p "$OUT"
export PYTHONPATH="$PWD/sdk:$PWD/export:$PWD/runtime" PYTHONUNBUFFERED=1
PY=${PY:-python3}
REF=${REF:-cuda}  # the SDK's device in the parity runs (REF=cpu tries the script without a GPU)
QUICK=${QUICK:-0}  # 1: one case per group, no benchmarks (a dry run of the script itself)
realm() { "$PY" -m realm_tools "$@"; }

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no GPU"
    lscpu | grep -E "Model name|^CPU\(s\)"
    "$PY" - <<'PYEOF'
import importlib.util, sys
import numpy, onnx, onnxruntime, onnxscript, timm, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      "timm", timm.__version__, "onnx", onnx.__version__, "onnxscript", onnxscript.__version__,
      "onnxruntime", onnxruntime.__version__, "numpy", numpy.__version__)
print("providers", onnxruntime.get_available_providers())
print("onnxruntime.training importable:", importlib.util.find_spec("onnxruntime.training") is not None)
PYEOF
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# Parity, SDK on CUDA (full float32), runtime = portable graph on the CPU onnxruntime; four
# groups side by side (16 cores), 4 threads each for torch's CPU side (the export).
group() {  # name, cases...
    local name=$1; shift
    if [ "$QUICK" = 1 ]; then set -- "$1"; fi
    OMP_NUM_THREADS=4 timeout 330 "$PY" -m realm_tools parity --reference-device "$REF" \
        --backend onnx --no-progress --cases "$@" --out "$WORK/parity-$name" >"$WORK/parity-$name.log" 2>&1
    echo "parity group $name: rc $?"
}
group digits digits-cifar-realm digits-imagenet-realm digits-imagenet-preset digits-cifar-tent \
    digits-cifar-eata digits-imagenet-eata digits-cifar-bounds digits-imagenet-bounds &
group cnn resnet18_bn-cifar resnet18_bn-imagenet convnext_atto-cifar convnext_atto-imagenet &
group swin swin_small_cfg-cifar swin_small_cfg-imagenet-tent vit_tiny-cifar-tent &
group r50 resnet50_gn-imagenet &
wait
grep -h -E "^[a-z0-9_-]+: |Error|error" "$WORK"/parity-*.log | head -40
cat "$WORK"/parity-*.md >"$OUT/parity.md"
[ "$QUICK" = 1 ] && exit 0

# The SDK's updating step on the GPU (torch eager, batch 1, TF32 off), for the record.
timeout 120 "$PY" - <<'PYEOF' 2>&1 | tee "$OUT/sdk-cuda-step.txt"
import statistics, time, timm, torch
from realm_sdk import RealmAdapter
from realm_runtime import RealmConfig
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
for name, kw in [("resnet50_gn", {}), ("vit_base_patch16_224", {}), ("convnext_tiny", {})]:
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **kw).cuda().eval()
    cfg = RealmConfig.preset("imagenet", num_classes=1000, diversity_margin=1.0)  # every sample updates
    ad = RealmAdapter(model, cfg)
    xs = torch.randn(25, 1, 3, 224, 224, device="cuda")  # distinct samples: S_div lets them all through
    times = []
    for x in xs:
        torch.cuda.synchronize(); t = time.perf_counter()
        ad.adapt(x); torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    print(f"{name}: SDK updating step on {torch.cuda.get_device_name()}: median {statistics.median(times[5:]):.2f} ms "
          f"(20 steps after 5 warm-up), updates {ad.state.updates} of 25")
PYEOF

# The CPU speed table on this machine's CPU (2 threads, both sides on the CPU; onnx backend,
# the only one this onnxruntime has).
timeout 200 "$PY" -m realm_tools bench speed --models resnet50_gn --backends onnx --methods realm --json "$OUT/speed.json" \
    >"$OUT/speed.txt" 2>&1
echo "bench rc $?"
cat "$OUT/speed.txt" | tail -30
