"""What the command-line tools share: arguments and sessions, finding and opening tracks, the
random-weights verdict, the grader's compare report, Slurm jobs.
"""
