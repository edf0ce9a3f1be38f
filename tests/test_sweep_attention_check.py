"""glm_asr_lab/tuning/sweep_attention.py's check before a candidate is timed (the timing itself needs a GPU): a
candidate that drops keys, leaves rows unwritten or fails is reported and not timed; a right one is timed."""

import torch

from glm_asr_lab.tuning import sweep_attention


def attention(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def test_a_candidate_is_timed_only_when_it_computes_the_reference(monkeypatch, capsys):
    timed = []
    monkeypatch.setattr(sweep_attention, "graph_time_us", lambda launch, launches: timed.append(launches) or 7.0)
    torch.manual_seed(0)
    # The 5-minute clip's decode: 3,778 live keys, whose average is small (about 0.1 at most).
    q, k, v = torch.randn(1, 16, 1, 128), torch.randn(1, 4, 3778, 128), torch.randn(1, 4, 3778, 128)
    ref = attention(q, k, v).to(torch.bfloat16)
    out = torch.empty_like(ref)

    def right(_):
        out.copy_(attention(q, k, v))

    def drops_a_block(_):  # 64 keys short: 0.014 off in absolute terms, 15 % of the largest value
        out.copy_(attention(q, k[:, :, :-64], v[:, :, :-64]))

    def leaves_a_row(_):
        out[:, :, :, 1:] = ref[:, :, :, 1:]

    def fails(_):
        raise RuntimeError("out of resource: shared memory")

    assert sweep_attention.checked_us(right, out, ref, "right", 3) == 7.0 and timed == [3]
    # Right after a right candidate: the row left unwritten still holds its value unless out is reset.
    for launch in (leaves_a_row, drops_a_block, fails):
        assert sweep_attention.checked_us(launch, out, ref, launch.__name__, 3) is None
    assert timed == [3]
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in printed] == [["wrong", "leaves_a_row:"], ["wrong", "drops_a_block:"],
                                                      ["skipped", "fails:"]]


def test_the_error_is_judged_row_by_row(monkeypatch, capsys):
    """Causal prefill: row 0 attends to one value row (about 3), late rows average hundreds (about 0.1). A
    candidate that hides the diagonal key from the last rows is 1 % off against the largest value but 22 %
    off in its own rows: judged row by row, it is wrong."""
    monkeypatch.setattr(sweep_attention, "graph_time_us", lambda launch, launches: 7.0)
    torch.manual_seed(0)
    T = 1024
    q, k, v = (torch.randn(1, 2, T, 64) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).to(torch.bfloat16)
    rows, keys = torch.arange(T)[:, None], torch.arange(T)[None, :]
    visible = (keys <= rows) & ~((rows >= 900) & (keys == rows))
    out = torch.empty_like(ref)

    def hides_the_diagonal_late(_):
        out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible))

    def right(_):
        out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))

    assert sweep_attention.checked_us(hides_the_diagonal_late, out, ref, "late diagonal", 1) is None
    assert sweep_attention.checked_us(right, out, ref, "right", 1) == 7.0
    assert capsys.readouterr().out.startswith("  wrong late diagonal:")
