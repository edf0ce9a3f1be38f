"""The course: what a student's run needs (model and engine, checkpoints and audio, the transformers
reference, the kernel checks, the runtimes, the timer, the command line). It never imports glm_asr_lab."""
