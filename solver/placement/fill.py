"""Spread a group of experts over a group of GPUs so that every GPU carries exactly the group's mean load.

This is the water-filling step of expert placement. No CP-SAT here, and no choice of groups (that is
``groups.py``): given ``k`` experts and ``m`` GPUs with ``slots`` expert slots each, it returns, per GPU,
the (expert, tokens) pieces it hosts.

Why it always works. If ``k <= (slots - 1) * m + 1`` the mean ``T = W / m`` is reachable. Proof by the
construction itself, one GPU at a time: with ``R`` GPUs and ``k`` experts left (``k <= (slots-1)R + 1``),
put ``a >= max(0, k - (slots-1)(R-1) - 1)`` whole experts on the GPU and top it up to exactly ``T`` with a
piece of the largest remaining expert ``L``; the rest of ``L`` stays for the next GPUs. Afterwards
``k' <= (slots-1)(R-1) + 1`` again, and the last GPU receives at most ``slots`` experts. A set of ``a``
whole experts with total in ``[T - w_L, T]`` exists: the ``a`` smallest weigh at most ``a W / k <= T``
(because ``a <= k / m``), and swapping them one by one for the largest ones moves the total in steps of at
most ``w_L``; if even the ``a + 1`` largest weigh less than ``T``, ``a`` grows (up to ``slots - 1``),
which cannot run out because ``ceil(k / slots) <= m`` groups of ``slots`` experts carry the whole load.
Each GPU hosts a given expert at most once, since a remainder only moves on to later GPUs.

One redundant slot per GPU (``slots * m >= k + m``) always satisfies the condition, so such a layer is
balanced exactly.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

Pieces = list[list[tuple[int, float]]]  # per GPU: (expert, tokens of that expert it serves)


def fits_in_one_group(num_experts: int, num_gpus: int, slots: int) -> bool:
    """True when ``num_experts`` can be balanced exactly over ``num_gpus`` GPUs of ``slots`` slots."""
    return num_experts <= (slots - 1) * num_gpus + 1


def fill_group(experts: Sequence[tuple[int, float]], num_gpus: int, slots: int) -> Pieces:
    """Pieces per GPU giving each of ``num_gpus`` GPUs the load ``sum(loads) / num_gpus``.

    ``experts`` lists (expert id, tokens); it must satisfy ``fits_in_one_group``. Every expert appears,
    zero-load ones included, and no GPU holds more than ``slots`` pieces.

    >>> fill_group([(0, 3.0), (1, 1.0)], 2, 2)
    [[(0, 2.0)], [(0, 1.0), (1, 1.0)]]
    """
    if not fits_in_one_group(len(experts), num_gpus, slots):
        raise ValueError(f"{len(experts)} experts do not fit {num_gpus} GPUs x {slots} slots as one group")
    # pool: (remaining tokens, expert), ascending; ties broken by expert id for a deterministic result.
    pool: list[tuple[float, int]] = sorted((float(w), e) for e, w in experts)
    started: set[int] = set()  # experts with a piece already placed (their remainder may be tiny)
    out: Pieces = []
    for gpu in range(num_gpus):
        left = num_gpus - gpu
        if left == 1 or not pool:
            out.append([(e, w) for w, e in pool if w > 0 or e not in started])
            pool = []
            continue
        out.append(_fill_one(pool, left, slots, started))
    return out


def _fill_one(pool: list[tuple[float, int]], left: int, slots: int, started: set[int]) -> list[tuple[int, float]]:
    """One GPU of the construction: whole experts plus a piece of the largest; updates ``pool``."""
    total = sum(w for w, _ in pool)
    target = total / left  # recomputed per GPU so rounding errors do not pile up on the last one
    big_w, big_e = pool.pop()
    n = len(pool)
    prefix = [0.0]
    for w, _ in pool:
        prefix.append(prefix[-1] + w)
    # Whole experts needed here so that the remaining GPUs can still take the remaining experts.
    count = max(0, n + 1 - (slots - 1) * (left - 1) - 1)
    cap = min(slots - 1, n)
    while count < cap and big_w + prefix[n] - prefix[n - count] < target:
        count += 1
    count = min(count, cap)
    # Slide from the `count` smallest towards the `count` largest until the whole ones reach target - big_w.
    need = target - big_w
    swap = count
    for j in range(count + 1):
        if prefix[count - j] + prefix[n] - prefix[n - j] >= need:
            swap = j
            break
    chosen = list(range(count - swap)) + list(range(n - swap, n))
    whole = [pool[i] for i in chosen]
    for i in reversed(chosen):
        pool.pop(i)
    placed = sum(w for w, _ in whole)
    pieces = [(e, w) for w, e in whole]
    piece = min(big_w, max(0.0, target - placed))
    rest = big_w - piece
    if rest <= 1e-12 * max(target, 1e-300):
        piece, rest = big_w, 0.0
    if piece > 0 or (rest == 0 and big_e not in started):
        pieces.append((big_e, piece))
        started.add(big_e)
    if rest > 0:
        bisect.insort(pool, (rest, big_e))
    return pieces
