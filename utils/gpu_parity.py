#!/usr/bin/env python3
"""Full-size parity on a GPU: tracks vs transformers' GlmAsr on identical random weights.

    python utils/gpu_parity.py [--tracks glm_asr_scratch,glm_asr_triton_example] [--dtypes float32,bfloat16]

For each dtype: one set of seeded full-size random weights (the real model's sizes from transformers'
GlmAsrConfig) is handed to transformers (sdpa attention) and to each track. Prints the relative error
of the prefill logits (‖Δ‖/‖ref‖ and max|Δ|/max|ref|), how many of 30 greedy tokens agree before the
first difference, and transformers' own time for one transcription (13 tokens) as the speed anchor.
Writes one JSON line per (track, dtype) to --json, with both token sequences. The weights
(glm_asr_common.checkpoint.random_weights) are scaled so that greedy decoding is not degenerate: the
run prints how many distinct ids transformers produced and its smallest top-1/top-2 logit gap, and at
a first difference, how close transformers was to choosing the track's id. The teacher-forced
regret (transformers fed the track's own ids: how far each chosen id falls below transformers'
best logit at that step) judges the whole decode path even after a near-tie has split the
sequences: a correct track stays within rounding noise of transformers' choice at every step.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from glm_asr_common.audio import load_audio  # noqa: E402
from glm_asr_common.checkpoint import DTYPES, default_config_dict, random_weights, transformers_name  # noqa: E402
from glm_asr_common.config import ModelConfig  # noqa: E402
from glm_asr_common.frontend import prepare_inputs  # noqa: E402
from glm_asr_common.runtime import REPO_ROOT, import_track  # noqa: E402


def transformers_model(raw_config: dict, weights: dict, dtype, device):
    from transformers import GlmAsrConfig, GlmAsrForConditionalGeneration

    config = GlmAsrConfig(**raw_config)
    config._attn_implementation = "sdpa"
    with torch.device(device):  # rotary buffers need real memory; the random init is then replaced
        model = GlmAsrForConditionalGeneration(config).to(dtype)
    state = {transformers_name(k): v for k, v in weights.items()}
    model.load_state_dict(state, assign=True, strict=True)
    model.tie_weights()
    return model.to(device, dtype).eval()


def hf_inputs(inputs, dtype, device):
    return dict(
        input_ids=torch.from_numpy(inputs.input_ids).to(device),
        attention_mask=torch.from_numpy(inputs.attention_mask).to(device),
        input_features=torch.from_numpy(inputs.input_features).to(device, dtype),
        input_features_mask=torch.from_numpy(inputs.input_features_mask).to(device),
    )


def agreeing_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, warmup=1, runs=3) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1000)
    return times


def top2_gap(logits: torch.Tensor) -> float:
    """Best minus second-best logit of one step: how near a tie transformers' choice was."""
    best, second = logits.topk(2).values
    return float(best - second)


def teacher_forced_regret(hf, feed: dict, ids: list[int]) -> tuple[float, int, float]:
    """How far the track's greedy ids stray from transformers' own choice, given the track's prefix.

    One transformers forward over prompt + ids; at each step t, regret = max logit - logit of ids[t].
    A correct decode path picks transformers' argmax, or a near-tie of it, at every step, even after
    a near-tie has sent the two sequences apart. Returns (max regret, its step, transformers' top-2
    gap at that step).
    """
    prompt_len = feed["input_ids"].shape[1]
    extra = torch.tensor([ids[:-1]], dtype=feed["input_ids"].dtype, device=feed["input_ids"].device)
    forced = dict(feed, input_ids=torch.cat([feed["input_ids"], extra], 1),
                  attention_mask=torch.cat([feed["attention_mask"], torch.ones_like(extra)], 1))
    logits = hf(**forced).logits[0, prompt_len - 1:].float()
    chosen = logits.gather(1, torch.tensor(ids, device=logits.device)[:, None])[:, 0]
    regret = logits.max(1).values - chosen
    step = int(regret.argmax())
    return float(regret[step]), step, top2_gap(logits[step])


@torch.no_grad()
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tracks", default="glm_asr_scratch,glm_asr_triton_example")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--json", default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--config", metavar="DIR", help="take sizes from DIR/config.json (smoke tests)")
    args = parser.parse_args()

    # The reference in true fp32: PyTorch lets cuDNN convolutions use TF32 by default, which would put
    # transformers' conv stem (and so every logit) at TF32 precision while calling itself fp32.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    raw = json.loads((Path(args.config) / "config.json").read_text()) if args.config else default_config_dict()
    cfg = ModelConfig.from_dict(raw)
    inputs = prepare_inputs([load_audio(REPO_ROOT / "test_audio.wav")], cfg, None)
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = DTYPES[dtype_name]
        weights = random_weights(cfg, dtype, seed=0, device=args.device)
        hf = transformers_model(raw, weights, dtype, args.device)
        feed = hf_inputs(inputs, dtype, args.device)
        ref_logits = hf(**feed).logits.float()
        ref = hf.generate(**feed, do_sample=False, max_new_tokens=args.tokens, min_new_tokens=args.tokens,
                          output_scores=True, return_dict_in_generate=True)
        ref_ids = ref.sequences[0, inputs.input_ids.shape[1]:].tolist()
        ref_scores = [step[0].float() for step in ref.scores]  # logits transformers chose each token from
        gaps = [top2_gap(step) for step in ref_scores]
        print(f"[{dtype_name}] transformers' {args.tokens} tokens: {len(set(ref_ids))} distinct ids, top-2 logit gap "
              f"min {min(gaps):.3g}, median {statistics.median(gaps):.3g}")
        hf_ms = timed(lambda: hf.generate(**feed, do_sample=False, max_new_tokens=13, min_new_tokens=13))
        print(f"[{dtype_name}] transformers sdpa: {statistics.median(hf_ms):.1f} ms per transcription (13 tokens)")
        for track in args.tracks.split(","):
            model = import_track(track).load_model(cfg, weights, args.device, dtype)
            logits = model.prefill_logits(inputs).float()
            diff = (logits - ref_logits).abs()
            ids = model.generate(inputs, args.tokens, args.tokens)[0]
            agree = agreeing_prefix(ids, ref_ids)
            row = {
                "track": track, "dtype": dtype_name, "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                "rel_err_norm": float((logits - ref_logits).norm() / ref_logits.norm()),
                "rel_err_max": float(diff.max() / ref_logits.abs().max()),
                "tokens_agree": agree, "tokens": args.tokens, "hf_ms_median": statistics.median(hf_ms),
                "distinct_ids": len(set(ref_ids)), "min_top2_gap": min(gaps), "ids": ids, "ref_ids": ref_ids,
            }
            regret, regret_step, regret_gap = teacher_forced_regret(hf, feed, ids)
            row.update(max_regret=regret, max_regret_step=regret_step, max_regret_top2_gap=regret_gap)
            note = f"; teacher-forced regret max {regret:.3g} at token {regret_step} (top-2 gap there {regret_gap:.3g})"
            if agree < min(len(ids), len(ref_ids)):
                # How close transformers itself was to picking this track's token at the first difference:
                # a near-tie that rounding differences can flip, or a real error.
                step = ref_scores[agree]
                row["first_difference_gap"] = float(step[ref_ids[agree]] - step[ids[agree]])
                note += (f"; at token {agree} transformers' logit for its id beats ours by "
                         f"{row['first_difference_gap']:.3g} (its top-2 gap there: {gaps[agree]:.3g})")
            rows.append(row)
            print(f"[{dtype_name}] {track}: logits rel err {row['rel_err_norm']:.2e} (norm), "
                  f"{row['rel_err_max']:.2e} (max); greedy agrees for {agree}/{args.tokens} tokens{note}")
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in rows) + "\n")


if __name__ == "__main__":
    main()
