"""``make bench``: our code side by side with the baselines a user would pick instead.

Run as ``python -m benchmarks [--quick]``. Each case's ratio is ours / baseline (lower is better),
measured in the same process and the same run; the table is printed and ``benchmarks/results.json``
holds one record per case.
"""
