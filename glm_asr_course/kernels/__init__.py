"""The course's own tooling for the student kernels: TODO stand-ins, the kernels' case table and
the self-checks that run it; and the greedy-head case both fast paths' self-checks run.
"""
