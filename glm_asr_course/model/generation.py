"""Greedy-decoding bookkeeping shared by every track: when to ban eos, when each row is done.

The tracks own the arithmetic (prefill, decode step, argmax); this owns the rules, which match
transformers' ``generate(do_sample=False)``: eos ids are banned while fewer than ``min_new_tokens``
tokens exist, a row stops at its first eos (kept in its output), the batch stops when every row has
stopped or ``max_new_tokens`` tokens exist.
"""


class GreedyStopper:
    def __init__(self, batch_size: int, eos_token_ids, max_new_tokens: int, min_new_tokens: int = 0):
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        self.eos = set(int(i) for i in eos_token_ids)
        self.max_new_tokens = max_new_tokens
        self.min_new_tokens = min(min_new_tokens, max_new_tokens)
        self.tokens: list[list[int]] = [[] for _ in range(batch_size)]
        self.done = [False] * batch_size
        self.steps_taken = 0  # tokens generated so far, the same for every row

    def ban_eos(self) -> bool:
        """Whether the next token must not be an eos id."""
        return self.steps_taken < self.min_new_tokens

    def add(self, next_ids) -> bool:
        """Record one token per row; return True when generation should stop."""
        for row, token in enumerate(next_ids):
            if not self.done[row]:
                self.tokens[row].append(int(token))
                self.done[row] = int(token) in self.eos
        self.steps_taken += 1
        return all(self.done) or self.steps_taken >= self.max_new_tokens
