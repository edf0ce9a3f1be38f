#!/usr/bin/env python3
"""Would one persistent kernel stream a decode step's weights faster than a launch per GEMV?
(utils/gpu_check.sh persistent_chain)

    python -m glm_asr_lab.measure.persistent_chain [--layers N] [--rounds 2] [--jsonl PATH]

The Triton fast path's decode step is 141 launches. Between two of them the GPU drains one launch and fills
the next, and a launch's last wave leaves SMs idle. A persistent kernel keeps one set of programs resident
for the whole step and puts a grid-wide barrier where one phase's output feeds the next. Before building the
whole step that way, this probe times the structure on the step's weight stream alone. Two arms, each one
CUDA graph replayed back to back, in A B B A order:

- launches: the fast path's own one-row GEMV launcher (fast_linear.linear: this GPU's tiles, programmatic
  dependent launch), one launch per matrix. Per layer q|k|v, o, gate|up, down, then lm_head; each reads
  the output of the one before.
- persistent: the same chain in one launch of persistent_gemv_chain_kernel, one or more programs per SM
  and a grid barrier between phases. Between counting itself in at the barrier and waiting there, each
  program loads the first columns of its next weight tile, as a PDL launch does before its wait.

Neither arm has RMSNorm, RoPE, attention or a residual: the same bytes, the same dependencies, only the
structure differs. The floor is the bytes at the copy bandwidth measured in the same run. Both arms then run a
second chain of as many phases on 1024 x 1024 matrices (2 MiB each): what a phase costs when it has few bytes to
move. An arm's last output must be within 5 % (relative norm) of torch's, and no barrier may have timed out,
before it is timed and again after. Results: docs/performance.md, 2026-11-28 (a).
"""

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from glm_asr_course.runtimes.triton_helpers import INTERPRET, round_to
from glm_asr_lab.measure import occupancy
from glm_asr_lab.measure.timeline import replay_us

PHASE_FIELDS = tl.constexpr(5)  # per phase: weight offset, N, K, input offset, output offset (elements)
ALIGN = tl.constexpr(64)  # every matrix and activation slot starts at a multiple of 64 elements (128 bytes in bf16)
MAX_SPINS = 1 << 16  # polls: a barrier that waits longer reports a timeout instead of hanging the GPU
# (programs per SM, BLOCK_N rows, BLOCK_K elements, warps, how the barrier polls) tried by main()
CONFIGS = ((2, 8, 1024, 4, "atomic"), (2, 8, 1024, 4, "volatile"), (1, 16, 1024, 8, "atomic"),
           (1, 16, 1024, 8, "volatile"), (3, 8, 1024, 4, "atomic"), (2, 16, 1024, 4, "atomic"))
TINY = 1024  # the fixed-cost chain: as many phases, each a TINY x TINY matrix (2 MiB in bf16)


@triton.jit
def _arrive(counter_ptr):
    """Count this program in at counter_ptr. The CTA barrier first makes every warp's stores part of what the
    release publishes."""
    tl.debug_barrier()
    tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@triton.jit
def _wait(counter_ptr, target, timeout_ptr, POLL: tl.constexpr, MAX_SPINS: tl.constexpr):
    """Wait until the count at counter_ptr reaches ``target``; set timeout_ptr after MAX_SPINS polls instead.

    The count only grows within a launch (run_persistent zeroes it before each), so a barrier needs no
    reset. POLL "atomic": one thread polls with acquiring atomics and shares each answer through shared
    memory. "volatile": every thread polls with volatile loads; one acquiring read after the poll orders
    the next phase's loads after what the other programs stored, and is the value checked.
    """
    spins = 0
    if POLL == "volatile":
        while (tl.load(counter_ptr, volatile=True) < target) & (spins < MAX_SPINS):
            spins += 1
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    else:
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        while (seen < target) & (spins < MAX_SPINS):
            seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
            spins += 1
    if seen < target:
        tl.atomic_or(timeout_ptr, 1)
    tl.debug_barrier()


@triton.jit
def _phase_fields(phases_ptr, phase, BLOCK_K: tl.constexpr):
    """(weight offset, N, K, input offset, output offset) of ``phase``, with the alignment build_chain gives
    them, so that the loads of weights and activations compile to 16-byte vectors."""
    fields = phases_ptr + phase * PHASE_FIELDS
    return (tl.multiple_of(tl.load(fields), ALIGN), tl.load(fields + 1),
            tl.multiple_of(tl.load(fields + 2), BLOCK_K), tl.multiple_of(tl.load(fields + 3), ALIGN),
            tl.multiple_of(tl.load(fields + 4), ALIGN))


@triton.jit
def _first_chunk(w_ptr, phases_ptr, phase, pid, r, offs_k, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """The first BLOCK_K columns of this program's first row tile of ``phase`` (zeros past the rows)."""
    w_off, n, k_len, _, _ = _phase_fields(phases_ptr, phase, BLOCK_K)
    rows = pid * ROWS + r
    return tl.load(w_ptr + w_off + rows[:, None] * k_len + offs_k[None, :], mask=(rows < n)[:, None], other=0.0)


@triton.jit
def persistent_gemv_chain_kernel(w_ptr, act_ptr, phases_ptr, counter_ptr, timeout_ptr, first_phase, last_phase,
                                 ROWS: tl.constexpr, BLOCK_K: tl.constexpr, POLL: tl.constexpr,
                                 MAX_SPINS: tl.constexpr):
    """Phases first_phase … last_phase − 1 of a chain of one-row GEMVs, act[out] = W @ act[in : in + K].

    phases_ptr holds PHASE_FIELDS int64 per phase (see PHASE_FIELDS). Row tiles go to the programs in
    turn. Between two phases every program waits at a grid barrier, so the launch must have all its
    programs resident at once (resident_programs checks; a barrier that waits too long sets timeout_ptr).
    Under the interpreter, which runs programs one after another, the caller launches one phase at a time
    and no barrier runs.
    """
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    r = tl.arange(0, ROWS)
    offs_k = tl.arange(0, BLOCK_K)
    w_next = _first_chunk(w_ptr, phases_ptr, first_phase, pid, r, offs_k, ROWS, BLOCK_K)
    for phase in range(first_phase, last_phase):
        w_off, n, k_len, in_off, out_off = _phase_fields(phases_ptr, phase, BLOCK_K)
        w_first = w_next
        for tile in range(pid, n // ROWS, programs):
            rows = tile * ROWS + r
            w_rows = w_ptr + w_off + rows[:, None] * k_len + offs_k[None, :]
            # The activation slots are rewritten every phase. The acquire after each barrier invalidates L1 (CCTL
            # in the machine code); .cg reads L2 whatever the barrier compiles to.
            x = tl.load(act_ptr + in_off + offs_k, cache_modifier=".cg").to(tl.float32)
            acc = w_first.to(tl.float32) * x[None, :]
            for k in range(BLOCK_K, k_len, BLOCK_K):
                x = tl.load(act_ptr + in_off + k + offs_k, cache_modifier=".cg").to(tl.float32)
                acc += tl.load(w_rows + k).to(tl.float32) * x[None, :]
            # The next tile's first columns, loaded before this tile's reduction and store.
            w_first = tl.load(w_rows + programs * ROWS * k_len, mask=(rows + programs * ROWS < n)[:, None],
                              other=0.0)
            tl.store(act_ptr + out_off + rows, round_to(tl.sum(acc, axis=1), act_ptr.dtype.element_ty))
        if phase + 1 < last_phase:
            # Loaded after the arrival: a release waits for this thread's earlier memory accesses.
            _arrive(counter_ptr)
            w_next = _first_chunk(w_ptr, phases_ptr, phase + 1, pid, r, offs_k, ROWS, BLOCK_K)
            _wait(counter_ptr, (phase + 1 - first_phase) * programs, timeout_ptr, POLL, MAX_SPINS)


def _aligned(n: int) -> int:
    return -(-n // ALIGN.value) * ALIGN.value


def decode_chain_shapes(cfg) -> list[tuple[str, int, int]]:
    """(name, N, K) of one decoder layer's four one-row GEMVs, in step order, from the model's config."""
    d = cfg.decoder
    return [("qkv", (d.num_heads + 2 * d.num_kv_heads) * d.head_dim, d.hidden_size),
            ("o", d.hidden_size, d.num_heads * d.head_dim),
            ("gate_up", 2 * d.intermediate_size, d.hidden_size),
            ("down", d.hidden_size, d.intermediate_size)]


@dataclass
class Chain:
    """One step's weight stream laid out for both arms: one flat weight buffer and one activation buffer."""

    weights: torch.Tensor  # every matrix, flat
    act: torch.Tensor  # the input x, then one output slot per matrix name
    phases: torch.Tensor  # (phases, PHASE_FIELDS) int64, on the device
    views: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # per phase: (input (1, K), W (N, K), out (1, N))
    names: list[str]
    counter: torch.Tensor  # int32 (1,): the barrier's count
    timeout: torch.Tensor  # int32 (1,): set by a barrier that gave up

    @property
    def weight_bytes(self) -> int:
        return sum(w.numel() for _, w, _ in self.views) * self.weights.element_size()


def chain_order(layer_shapes: list[tuple[str, int, int]], layers: int, head: tuple[int, int]) -> list:
    """(name, N, K) of every phase: ``layers`` repeats of layer_shapes, then lm_head (N, K)."""
    return [shape for _ in range(layers) for shape in layer_shapes] + [("lm_head", *head)]


def build_chain(layer_shapes: list[tuple[str, int, int]], layers: int, head: tuple[int, int], dtype, device,
                seed: int = 0) -> Chain:
    """chain_order's phases on random weights of scale K^-1/2 (the activations keep their size down the
    chain) and a random input x. A phase reads the first K outputs of the phase before (x for the first)."""
    order = chain_order(layer_shapes, layers, head)
    slots, act_size = {}, _aligned(order[0][2])  # x first
    widths = {}
    for name, n, _ in order:
        if widths.setdefault(name, n) != n:
            raise ValueError(f"phases named {name} have {widths[name]} and {n} outputs: one slot holds one width")
        if name not in slots:
            slots[name] = act_size
            act_size += _aligned(n)
    w_offsets, w_size = [], 0
    for _, n, k in order:
        w_offsets.append(w_size)
        w_size += _aligned(n * k)
    generator = torch.Generator(device=device).manual_seed(seed)
    weights = torch.empty(w_size, dtype=dtype, device=device)
    act = torch.zeros(act_size, dtype=dtype, device=device)
    act[:order[0][2]].normal_(generator=generator)
    rows, views, in_off = [], [], 0
    for (name, n, k), w_off in zip(order, w_offsets):
        w = weights[w_off:w_off + n * k].view(n, k)
        w.normal_(0.0, k ** -0.5, generator=generator)
        out_off = slots[name]
        views.append((act[in_off:in_off + k].view(1, k), w, act[out_off:out_off + n].view(1, n)))
        rows.append((w_off, n, k, in_off, out_off))
        in_off = out_off
    phases = torch.tensor(rows, dtype=torch.int64, device=device)
    counter, timeout = (torch.zeros(1, dtype=torch.int32, device=device) for _ in range(2))
    return Chain(weights, act, phases, views, [name for name, _, _ in order], counter, timeout)


def reference_chain(chain: Chain, x: torch.Tensor) -> torch.Tensor:
    """The activation buffer after the chain, by torch from input x: each product in fp32, rounded to the
    dtype, as both arms round it."""
    act = chain.act.clone()
    act[:x.numel()] = x
    for w_off, n, k, in_off, out_off in chain.phases.tolist():
        w = chain.weights[w_off:w_off + n * k].view(n, k)
        act[out_off:out_off + n] = (w.float() @ act[in_off:in_off + k].float()).to(act.dtype)
    return act


def run_launches(chain: Chain) -> None:
    """The chain through the fast path's one-row GEMV launcher, one launch per matrix."""
    from glm_asr_triton_example.fast_linear import linear

    for inp, w, out in chain.views:
        linear(inp, w, out=out, precision="ieee")


def run_persistent(chain: Chain, programs: int, rows: int, block_k: int, num_warps: int, poll: str = "atomic"):
    """The chain in one persistent launch (under the interpreter: one launch a phase, no barrier); returns the
    compiled kernel."""
    for _, w, _ in chain.views:
        n, k = w.shape
        if n % rows or k % block_k:
            raise ValueError(f"a {n} x {k} matrix does not split into {rows} x {block_k} tiles")
    chain.counter.zero_()
    total = len(chain.views)
    spans = [(p, p + 1) for p in range(total)] if INTERPRET else [(0, total)]
    for first, last in spans:
        compiled = persistent_gemv_chain_kernel[(programs,)](
            chain.weights, chain.act, chain.phases, chain.counter, chain.timeout, first, last,
            ROWS=rows, BLOCK_K=block_k, POLL=poll, MAX_SPINS=MAX_SPINS, num_warps=num_warps)
    return compiled


def resident_programs(rows: int, block_k: int, num_warps: int, poll: str, per_sm: int, chain: Chain) -> int | None:
    """How many programs the persistent launch gets: per_sm on every SM, or None where the compiled kernel's
    registers, shared memory or threads do not let per_sm programs share an SM of sm_90 (the programs not
    resident would never reach the barrier; it would time out)."""
    sms = torch.cuda.get_device_properties(chain.weights.device).multi_processor_count
    # One program an SM always fits, so this first run, which compiles the kernel, needs no check.
    compiled = run_persistent(chain, sms, rows, block_k, num_warps, poll)
    fits = occupancy.blocks_an_sm(compiled.n_regs, 32 * num_warps,
                                  compiled.metadata.shared + occupancy.RESERVED_BYTES) >= per_sm
    return per_sm * sms if fits else None


def captured(fn) -> torch.cuda.CUDAGraph:
    fn()  # compiles outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, help="decoder layers in the chain (default: the model's)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--replays", type=int, default=100, help="timed replays an arm a round, in groups of 20")
    parser.add_argument("--jsonl", type=Path)
    args = parser.parse_args(argv)
    for option, value, least in (("--layers", args.layers, 1), ("--rounds", args.rounds, 1),
                                 ("--replays", args.replays, 20)):
        if value is not None and value < least:
            print(f"persistent_chain: {option} must be at least {least}, got {value}", file=sys.stderr)
            return 2
    if INTERPRET or not torch.cuda.is_available():
        print("persistent_chain times GPU kernels: it needs CUDA (and TRITON_INTERPRET unset)", file=sys.stderr)
        return 2

    from glm_asr_course.model.checkpoint import default_config_dict
    from glm_asr_course.model.config import ModelConfig
    from glm_asr_course.runtimes import gpu_name
    from glm_asr_lab.measure.roofline import measure_peaks

    cfg = ModelConfig.from_dict(default_config_dict())
    d = cfg.decoder
    layers = args.layers or d.num_layers
    layer_shapes = decode_chain_shapes(cfg)
    chains = {
        "step": build_chain(layer_shapes, layers, (d.vocab_size, d.hidden_size), torch.bfloat16, "cuda"),
        # As many phases, 2 MiB each: what each structure costs a phase with few bytes to move. Two slots in
        # turn, so that no phase writes the slot it reads.
        "fixed cost": build_chain([(f"tiny {i % 2}", TINY, TINY) for i in range(len(layer_shapes))], layers,
                                  (TINY, TINY), torch.bfloat16, "cuda"),
    }
    peaks = measure_peaks("cuda")
    gpu = gpu_name(torch.device("cuda"))
    print(f"{gpu}: copy {peaks.bandwidth / 1e9:,.0f} GB/s. Chains of {len(chains['step'].views)} one-row GEMVs: "
          f"the step's ({layers} layers + lm_head) and as many {TINY} x {TINY} ones")
    out = args.jsonl.open("w") if args.jsonl else None
    for name, chain in chains.items():
        floor_us = chain.weight_bytes / peaks.bandwidth * 1e6
        phases = len(chain.views)
        print(f"\n{name}: {chain.weight_bytes / 1e9:.3f} GB, floor {floor_us:.1f} µs")
        arms = checked_arms(chain)
        results = {arm: [] for arm in arms}
        for round_index in range(args.rounds):
            for arm in (list(arms) if round_index % 2 == 0 else list(arms)[::-1]):
                us = replay_us(arms[arm][0], args.replays)
                results[arm].append(us)
                print(f"  {arm:50s} round {round_index}  {us:8.1f} µs", flush=True)
                if out:
                    out.write(json.dumps(dict(gpu=gpu, chain=name, arm=arm, round=round_index, us=us,
                                              floor_us=floor_us, phases=phases)) + "\n")
                    out.flush()
        print(f"{'arm':52s} {'median µs':>10s} {'µs a phase':>11s} {'beyond bytes':>13s} {'of copy':>8s}")
        for arm, times in results.items():
            us = statistics.median(times)
            # Checked again after its timed replays: a barrier that timed out there, or a wrong result, shows.
            after = arms[arm][1]()
            print(f"{arm:52s} {us:10.1f} {us / phases:11.2f} {(us - floor_us) / phases:13.2f} {floor_us / us:8.1%}"
                  + ("" if after is None else f"  INVALID after timing: {after}"))
    if out:
        out.close()
    return 0


def checked_arms(chain: Chain) -> dict[str, tuple]:
    """Each arm's (graph, check) by arm name, once the check passes on an eager run. check() reads the arm's last
    output and the barriers' timeout flag as they are now: None when the output is within 5 % (relative norm)
    of torch's chain and no barrier timed out, else what went wrong. An arm that fails before timing is named
    and left out."""
    x = chain.act[:chain.views[0][0].numel()].clone()
    _, _, _, _, out_off = chain.phases[-1].tolist()
    expected = reference_chain(chain, x)[out_off:out_off + chain.views[-1][2].numel()].float()

    def check() -> str | None:
        torch.cuda.synchronize()
        error = ((chain.views[-1][2].view(-1).float() - expected).norm() / expected.norm()).item()
        if chain.timeout.item() or not error <= 0.05:  # NaN fails too
            return f"relative error {error:.3g}, barrier timeout {chain.timeout.item()}"
        return None

    def checked(arm: str, run) -> tuple | None:
        chain.timeout.zero_()
        chain.act[:x.numel()].copy_(x)
        run()
        failure = check()
        if failure:
            print(f"  {arm}: not timed ({failure})")
            return None
        return captured(run), check

    arms = {"launches (fast_linear.linear, PDL)": checked("launches", lambda: run_launches(chain))}
    for per_sm, rows, block_k, warps, poll in CONFIGS:
        arm = f"persistent {per_sm}/SM, {rows} x {block_k}, {warps} warps, {poll} poll"
        programs = resident_programs(rows, block_k, warps, poll, per_sm, chain)
        if programs is None:
            print(f"  {arm}: {per_sm} programs do not fit an SM")
            continue
        arms[arm] = checked(arm, lambda p=programs, r=rows, b=block_k, w=warps, q=poll:
                            run_persistent(chain, p, r, b, w, q))
    return {arm: value for arm, value in arms.items() if value is not None}


if __name__ == "__main__":
    sys.exit(main())
