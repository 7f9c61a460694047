"""Solving disaggregated deployments (issue 15): which prefill and decode worker layouts, how many of
each, and the decode batch, chosen together by CP-SAT.

``workers.py`` the candidates of each role, priced by ``solver/cost/disagg.py``; ``deploy.py`` a choice
made into a placed, priced, checked deployment; ``model.py`` the CP-SAT model; ``search.py`` the
objectives (tokens/s per GPU, the fewest GPUs for ``--rate``); ``walk.py`` the per-GPU search's first pass,
the deployments in brute force's order; ``ttft_cut.py`` floors under TTFT (per pair in the model, per
deployment before the exact check); ``prune.py`` the candidates that can beat
the per-GPU search's seed, priced no further than that needs; ``serving.py`` both serving modes side
by side; ``brute.py`` the brute force the tests hold the search to.
"""
