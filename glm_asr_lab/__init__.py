"""The lab: the instructor's tools (class grading, Slurm, the --compare report, profiling and
rooflines, the GPU record scripts, the synthetic class, the template generator). It uses the course."""
