#!/usr/bin/env bash
# The device calls of this record, by call number:  bash docs/gpu_runs/2026-11-23-h100-cutile-fast/run.sh N
# (after installing .whl/ into /tmp/site and sourcing .cutile/activate.sh; see commands.md).
set -uo pipefail
cd "$(dirname "$0")/../../.."
BENCH=(--random-weights --min-new-tokens 13 --max-new-tokens 13 --warmup 2 --runs 10)
step() {  # step SECONDS COMMAND...
    local limit=$1
    shift
    echo "=== $* ($(date -u +%H:%M:%S))"
    timeout "$limit" "$@" 2>&1
    echo "=== exit $?"
}
bench() {  # bench FOLDER PATH PRECISION
    step 150 ./benchmark.sh "$1" "${BENCH[@]}" --path "$2" --precision "$3"
}
three_paths_compared() {  # three_paths_compared PARITY_SECONDS DETAILED_SECONDS: calls 2 and 3
    bench glm_asr_cutile_example fast bf16
    bench glm_asr_triton_example fast bf16
    bench glm_asr_cutile_example cupy bf16
    step "$1" python3 utils/gpu_parity.py --tracks glm_asr_cutile_example:fast,glm_asr_cutile_example:cupy \
        --precisions fp32,bf16 --json "$OUT/parity.jsonl"
    step "$2" python3 benchmark_detailed.py glm_asr_cutile_example --path fast --random-weights --precision bf16 \
        --min-new-tokens 13 --max-new-tokens 13 --runs 3 --compare glm_asr_triton_example:fast \
        --compare glm_asr_cutile_example:cupy --json "$OUT/detailed_bf16.json"
}
step 30 bash -c 'nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, cupy, ml_dtypes, cuda.tile; print(torch.__version__, \"cupy\", cupy.__version__, \"ml_dtypes\", ml_dtypes.__version__, \"cuda.tile\", cuda.tile.__version__)"'
case "${1:-}" in
    1)
        for f in fast_linear fast_attention fast_rope fast_head; do
            step 120 python3 "glm_asr_cutile_example/$f.py"
        done
        bench glm_asr_triton_example fast bf16
        bench glm_asr_cutile_example fast bf16
        bench glm_asr_cutile_example cupy bf16
        step 90 python3 docs/gpu_runs/2026-11-23-h100-cutile-fast/graph_check.py bf16
        step 150 python3 utils/sweep_cutile_fast.py --only gemv,head,decode,flash,prefill,gemm
        ;;
    2)
        step 30 python3 -c "import cupy._core._routines_linalg as l; print('cupy set_compute_type:', hasattr(l, 'set_compute_type'), 'TF32 constant:', getattr(l, 'COMPUTE_TYPE_TF32', None))"
        three_paths_compared 240 200
        ;;
    3)
        three_paths_compared 150 150
        ;;
    *) echo "usage: run.sh 1|2|3" >&2; exit 2 ;;
esac
