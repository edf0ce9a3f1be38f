#!/usr/bin/env bash
# A/B of the H100 entry of the cuTile KERNEL_HINTS_BY_GPU: each arm's fast_linear.py in place; the test
# clip and the 5-minute clip, cuTile fast path, bf16.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
source .cutile/activate.sh
mkdir -p $OUT/hints /tmp/clips
python3 -c "from pathlib import Path; from glm_asr_lab.gpu.clips import write_clips; write_clips(Path('/tmp/clips'))"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $OUT/log.txt
run() {  # run ARM CLIP RUNS [--audio FILE]
    local arm=$1 clip=$2 runs=$3; shift 3
    echo "=== arm $arm, $clip ($(date -u +%H:%M:%S))" | tee -a $OUT/log.txt
    cp .ab/hints/$arm.py glm_asr_cutile_example/fast_linear.py
    timeout 150 python3 benchmark_detailed.py glm_asr_cutile_example --path fast --precision bf16 --random-weights \
        --min-new-tokens 13 --max-new-tokens 13 --warmup 1 --runs $runs --top 8 "$@" \
        --json $OUT/hints/${arm}_$clip.json > $OUT/hints/${arm}_$clip.txt 2>&1
    echo "exit $?" | tee -a $OUT/log.txt
    grep -E "ms median|span |gemv_kernel|gemm_kernel" $OUT/hints/${arm}_$clip.txt | head -8 | tee -a $OUT/log.txt
}
run nohint test 5
run hint test 5
run nohint 5min 3 --audio /tmp/clips/clip4.wav
run hint 5min 3 --audio /tmp/clips/clip4.wav
run nohint test 5
cp .ab/hints/hint.py glm_asr_cutile_example/fast_linear.py
tar czf $OUT/hints.tgz -C $OUT hints && rm -rf $OUT/hints
