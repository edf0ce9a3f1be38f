"""Everything the tracks share that is not kernel code: checkpoints, audio, front end, scoring, CLI."""
