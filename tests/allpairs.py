"""An all-pairs (pairwise) design: few cells in which every pair of two factors' levels meets at
least once, among the cells a rule lets run. Greedy and deterministic (the same cells every time)."""
import itertools


def pairs_of(cell):
    """Returns the set of ((factor, level), (factor, level)) pairs a cell (a dict) holds, in factor order."""
    items = list(cell.items())
    return {(a, b) for a, b in itertools.combinations(items, 2)}


def every_pair(factors):
    """Returns every pair of levels of two different factors ({name: levels}, in that order)."""
    names = list(factors)
    return {((a, x), (b, y)) for a, b in itertools.combinations(names, 2)
            for x in factors[a] for y in factors[b]}


def all_pairs(factors, refusal, cost=lambda cell: 0):
    """Returns (cells, impossible) for `factors` ({name: tuple of levels}): `cells`, cells that
    `refusal` lets run (refusal(cell) is None) which together hold every pair of levels some such
    cell holds; `impossible`, the sorted pairs no such cell holds (every cell with one is refused).

    Each step takes, of the whole product, the runnable cell holding the most pairs not yet held;
    a tie goes to the lower `cost`, then to the first in the product's order."""
    names = list(factors)
    runnable = [cell for cell in (dict(zip(names, levels)) for levels in itertools.product(*factors.values()))
                if refusal(cell) is None]
    needed = set().union(*(pairs_of(cell) for cell in runnable))
    cells, left = [], set(needed)
    while left:
        best = max(runnable, key=lambda cell: (len(pairs_of(cell) & left), -cost(cell)))
        cells.append(best)
        left -= pairs_of(best)
    return cells, sorted(every_pair(factors) - needed)


def refused_cell(factors, refusal, pair, impossible):
    """Returns the cell of the product that holds `pair` and the fewest `impossible` pairs (the last
    in order of those: the factors' other values, not their first), with the refusal it gets."""
    (a, x), (b, y) = pair
    names = list(factors)
    holding = [cell for cell in (dict(zip(names, levels)) for levels in itertools.product(*factors.values()))
               if cell[a] == x and cell[b] == y]
    cell = min(reversed(holding), key=lambda c: len(pairs_of(c) & set(impossible)))
    return cell, refusal(cell)
