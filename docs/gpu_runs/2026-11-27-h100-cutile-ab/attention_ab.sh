#!/usr/bin/env bash
# A/B of the cuTile decode attention rule on the 5-minute clip: each arm's fast_attention.py in place.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
source .cutile/activate.sh
mkdir -p $OUT/ab /tmp/clips
python3 -c "from pathlib import Path; from glm_asr_lab.gpu.clips import write_clips; print(write_clips(Path('/tmp/clips')))"
for arm in "$@"; do
    echo "=== arm $arm ($(date -u +%H:%M:%S))" | tee -a $OUT/log.txt
    cp .ab/arms/$arm.py glm_asr_cutile_example/fast_attention.py
    timeout 150 python3 benchmark_detailed.py glm_asr_cutile_example --path fast --precision bf16 --random-weights \
        --audio /tmp/clips/clip4.wav --min-new-tokens 13 --max-new-tokens 13 --warmup 1 --runs 3 --top 14 \
        --json $OUT/ab/$arm.json > $OUT/ab/$arm.txt 2>&1
    echo "exit $?" | tee -a $OUT/log.txt
    grep -E "ms median|decode_attention|decode_combine|span " $OUT/ab/$arm.txt | tee -a $OUT/log.txt
done
cp .ab/arms/before.py glm_asr_cutile_example/fast_attention.py
python3 - $OUT/ab "$@" <<'PY'
import json, sys
folder, arms = sys.argv[1], sys.argv[2:]
ids = {arm: json.load(open(f"{folder}/{arm}.json"))["token_ids"] for arm in arms}
print("token ids equal across arms:", all(ids[a] == ids[arms[0]] for a in arms), ids[arms[0]])
PY
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
