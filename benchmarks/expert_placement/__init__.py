"""How close to a proven lower bound does expert placement get, against the greedy baseline, and how fast?

Run ``python -m benchmarks.expert_placement`` from the repository root; see README.md.
"""
