#!/usr/bin/env bash
# Everything that needs a GPU, in at most 8 minutes on one GPU, into ONE results file. Run by hand whenever a
# GPU is available; CI never depends on it.
#
#   benchmarks/gpu_suite.sh [RESULTS_FILE]          # default: gpu_suite_<date>.txt in the current folder
#
#   1. the GPU kernel tests (tests/kernels/test_gpu.py: every Triton kernel vs its reference, fp32 and bf16)
#   2. the kernel benchmark (benchmarks/kernel_bench.py: each kernel vs eager and torch.compile, time and memory)
#   3. SFT throughput in bf16 on the tiny demo model and on a real one (SmolLM2-135M-Instruct), our engine
#      (stock modules, then kernel_config: auto) against HF Trainer + peft, with the MFU: model FLOP/s over the
#      GPU's bf16 matmul peak measured in the same run (benchmarks/sft_throughput.py, benchmarks/flops.py); on
#      the real model also packed against padded batching, side by side (the wizard proposes packed rows only
#      on a CPU until this is measured)
#
# Environment: PYTHON (default: python), LFA_REAL_MODEL (a model folder or a downloaded registry id; default
# smollm2-135m-instruct: `lf-assistant models download smollm2-135m-instruct` first, the GPU host may be offline),
# LFA_GPU_SUITE_SMOKE=1 (the same steps at tiny sizes on CPU: checks the script itself, measures nothing).
# Each step has its own time limit so that the whole suite ends within 8 minutes even when one step hangs; a
# step that fails or times out is recorded with its exit status and the suite goes on.
set -uo pipefail

OUT=$(realpath -m "${1:-gpu_suite_$(date +%Y%m%d-%H%M%S).txt}")  # relative to where it was started
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
REAL=${LFA_REAL_MODEL:-smollm2-135m-instruct}
SMOKE=${LFA_GPU_SUITE_SMOKE:-0}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [ "$SMOKE" = 1 ]; then
    DEVICE=(--device cpu) KERNEL_BENCH=(--smoke) TINY_STEPS=4 REAL_STEPS=2 REPEATS=1
else
    DEVICE=(--device cuda --bf16) KERNEL_BENCH=() TINY_STEPS=60 REAL_STEPS=30 REPEATS=2
fi

if [ "$SMOKE" != 1 ] && ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    echo "gpu_suite.sh: no CUDA GPU visible to $PY (torch.cuda.is_available() is false, or torch is missing)." >&2
    echo "Run it on a machine with a GPU, or set LFA_GPU_SUITE_SMOKE=1 to check the script itself on the CPU." >&2
    exit 2
fi

started=$(date +%s)
step() {  # step NAME SECONDS COMMAND...: run with a time limit, output and exit status into the results file
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit}s, at +$(( $(date +%s) - started ))s): $*" | tee -a "$OUT"
    timeout --kill-after=5 "$limit" "$@" >>"$OUT" 2>&1
    local status=$?
    [ $status -eq 124 ] && echo "!!! $name: timed out after ${limit}s" | tee -a "$OUT"
    echo "=== $name: exit $status" | tee -a "$OUT"
    echo >>"$OUT"
}

{
    echo "lf-assistant GPU suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    "$PY" -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, 'peft', peft.__version__, 'gpu', torch.cuda.is_available())"
    echo
} >"$OUT" 2>&1

step "kernel tests" 100 "$PY" -m pytest tests/kernels/test_gpu.py -q -p no:cacheprovider
step "kernel benchmark" 100 "$PY" benchmarks/kernel_bench.py "${KERNEL_BENCH[@]}" --repeats 3
step "SFT throughput, tiny model" 100 "$PY" benchmarks/sft_throughput.py --model lf-tiny-qwen3 "${DEVICE[@]}" \
    --steps "$TINY_STEPS" --repeats "$REPEATS" --kernels auto
step "SFT throughput, $REAL" 170 "$PY" benchmarks/sft_throughput.py --model "$REAL" "${DEVICE[@]}" \
    --steps "$REAL_STEPS" --repeats 1 --strategy padded,packed --kernels auto

echo "done in $(( $(date +%s) - started ))s; results in $OUT" | tee -a "$OUT"
