"""How large are execution DAGs from 8 to 4,096 GPUs, and how long do they take to build and validate?

Run ``python -m benchmarks.dag`` from the repository root; see README.md.
"""
