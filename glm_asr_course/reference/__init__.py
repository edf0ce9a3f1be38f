"""What the tracks are judged against: transformers' own model, the model's operations in plain
torch, transformers-written tiny checkpoints, and transcript scoring.
"""
