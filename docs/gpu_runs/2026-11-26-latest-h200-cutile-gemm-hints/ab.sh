#!/usr/bin/env bash
# cuTile A/B (GEMM hints) on the test clip and the 5-minute clip, then the cuTile fast path's parity and regret.
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
source .cutile/activate.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p /tmp/clips /tmp/ab
python3 -c "from pathlib import Path; from glm_asr_lab.gpu.clips import write_clips; write_clips(Path('/tmp/clips'))"
arm() {  # arm NAME FILES-FOLDER AUDIO-ARGS...
    local name=$1 folder=$2; shift 2
    cp .ab/$folder/fast_linear.py glm_asr_cutile_example/fast_linear.py
    echo "=== arm $name ($(date -u +%H:%M:%S))" | tee -a $OUT/log.txt
    timeout 100 python3 benchmark_detailed.py glm_asr_cutile_example --path fast --precision bf16 --random-weights \
        --min-new-tokens 13 --max-new-tokens 13 --warmup 1 --runs 3 --top 12 "$@" > /tmp/ab/$name.txt 2>&1
    echo "exit $?" | tee -a $OUT/log.txt
    grep -E "ms median|decode step \(median|^prefill +gemm|^encoder +gemm|^projector +gemm" /tmp/ab/$name.txt | head -8 | tee -a $OUT/log.txt
}
arm before_test cbefore
arm after_test cafter
arm before_5min cbefore --audio /tmp/clips/clip4.wav
arm after_5min cafter --audio /tmp/clips/clip4.wav
cp .ab/cafter/fast_linear.py glm_asr_cutile_example/fast_linear.py
echo "=== parity+regret, cuTile fast ($(date -u +%H:%M:%S))" | tee -a $OUT/log.txt
timeout 150 python3 -m glm_asr_lab.gpu.parity --tracks glm_asr_cutile_example:fast --precisions fp32,tf32,bf16 \
    --json /tmp/ab/parity_cutile_fast.jsonl 2>&1 | grep -E "PASS|FAIL" | tee -a $OUT/log.txt
tar czf $OUT/ab.tgz -C /tmp ab
