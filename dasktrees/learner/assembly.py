"""One tree's records from its top, grown from summed histograms, and the subtrees grown below it.

A tree grown across workers (``distributed/levels.py``) comes in pieces: the records of its top
nodes, split from histograms summed over the blocks, and one ``grower.grow`` result per node
whose rows were gathered to grow its subtree. ``join`` makes them the records ``grow`` would
have returned for the whole tree, numbered as ``grow`` numbers a depth-first tree:

* the root is 0, and a node's children are numbered together, left then right, when the node is
  taken off the stack, the right child pushed first so the left subtree is numbered first. A
  gathered node's subtree is therefore numbered in one run right after the node is taken off
  the stack, in the order its own ``grow`` numbered it (its node k, k >= 1, becomes
  ``first + k - 1``);
* the bitset rows are ordered as the grower writes them, one per categorical split in the order
  the splits were made (the right child of a pair before the left), and shared as ``grow``
  shares them (``grower.share_bitsets``).

So a tree grown in pieces is the same records, bit for bit, as one grown whole.

A best-first tree (``max_leaf_nodes``) is grown whole first, as far as its pieces go: the top
from histograms, and each subtree best-first up to ``max_leaf_nodes`` leaves. ``best_first``
then replays the grower's heap over it, keyed by ``(-improvement, node id)`` with the ids given
in the order of the splits, and keeps the first ``max_leaf_nodes - 1`` splits. The replay needs
no node a subtree left unsplit: the splits of one subtree that the whole tree makes come in the
order the subtree's own heap made them (its nodes' keys compare the same way in both heaps), so
they are the first ones the subtree made, never more than it made.
"""

import heapq
from typing import NamedTuple

import numpy as np

from ..core.dtypes import BITSET_DTYPE, BITSET_WORDS, NODE_DTYPE, TREE_LEAF
from .grower import LEAF_RECORD, share_bitsets

# Kinds of a top node.
TOP_SPLIT, TOP_LEAF, TOP_SUBTREE = 0, 1, 2


class TreeTop(NamedTuple):
    """The top of a tree: records of the nodes split from summed histograms, the leaves among
    their children, and the nodes whose subtrees were grown from their gathered rows."""

    nodes: np.ndarray  # NODE_DTYPE (n_top,): left / right are top ids; node 0 the root
    values: np.ndarray  # float64 (n_top, n_values)
    bitsets: np.ndarray  # uint32 (n_bitsets, BITSET_WORDS): rows of the top's categorical splits
    kind: np.ndarray  # int64 (n_top,): TOP_SPLIT, TOP_LEAF or TOP_SUBTREE
    subtree: np.ndarray  # int64 (n_top,): a TOP_SUBTREE node's index in the subtrees, else -1


def _creation_rank(ids):
    """The order in which the grower makes the splits of nodes ``ids`` (numbered depth-first):
    the root first, then each pair of children, right (even id) before left (odd)."""
    return np.where(ids == 0, 0, np.where(ids % 2 == 1, ids + 1, ids - 1))


def join(top, subtrees):
    """The records of the whole tree (``grower.grow``'s ``nodes, values, bitsets``).

    Parameters
    ----------
    top : TreeTop
    subtrees : list of (nodes, values, bitsets)
        ``grow``'s records of each gathered node's subtree (its node 0 the gathered node).
    """
    if top.kind[0] == TOP_SUBTREE:
        return subtrees[top.subtree[0]]
    final = np.full(len(top.nodes), -1, dtype=np.int64)
    first = {}  # subtree index -> final id of its node 1

    def is_split(x):
        if top.kind[x] == TOP_SPLIT:
            return True
        return top.kind[x] == TOP_SUBTREE and len(subtrees[top.subtree[x]][0]) > 1

    final[0] = 0
    next_id = 1
    stack = [0] if top.kind[0] == TOP_SPLIT else []  # a root decided a leaf: a one-node tree
    while stack:
        x = stack.pop()
        if top.kind[x] == TOP_SUBTREE:
            first[top.subtree[x]] = next_id
            next_id += len(subtrees[top.subtree[x]][0]) - 1
            continue
        left, right = int(top.nodes[x]["left"]), int(top.nodes[x]["right"])
        final[left], final[right] = next_id, next_id + 1
        next_id += 2
        for child in (right, left):
            if is_split(child):
                stack.append(child)
    n_nodes = next_id
    n_values = top.values.shape[1]
    nodes = np.empty(n_nodes, dtype=NODE_DTYPE)
    values = np.empty((n_nodes, n_values))
    # Every categorical split's bitset row, with the final id of its node.
    rows, owners = [], []
    for x in range(len(top.nodes)):
        if top.kind[x] == TOP_SUBTREE:
            continue
        record = top.nodes[x].copy()
        if top.kind[x] == TOP_SPLIT:
            record["left"] = final[record["left"]]
            record["right"] = final[record["right"]]
            if record["bitset_idx"] >= 0:
                rows.append(top.bitsets[record["bitset_idx"] : record["bitset_idx"] + 1])
                owners.append([final[x]])
        if record["parent"] >= 0:
            record["parent"] = final[record["parent"]]
        nodes[final[x]] = record
        values[final[x]] = top.values[x]
    parent_of = np.full(len(top.nodes), -1, dtype=np.int64)
    for x in range(len(top.nodes)):
        if top.kind[x] == TOP_SPLIT:
            parent_of[top.nodes[x]["left"]] = x
            parent_of[top.nodes[x]["right"]] = x
    for x in np.flatnonzero(top.kind == TOP_SUBTREE):
        sub_nodes, sub_values, sub_bitsets = subtrees[top.subtree[x]]
        size = len(sub_nodes)
        # local id k -> final id: the gathered node's own for 0, a run from ``first`` after
        ids = np.empty(size, dtype=np.int64)
        ids[0] = final[x]
        if size > 1:
            ids[1:] = first[top.subtree[x]] + np.arange(size - 1)
        records = sub_nodes.copy()
        split = records["left"] != TREE_LEAF
        records["left"][split] = ids[records["left"][split]]
        records["right"][split] = ids[records["right"][split]]
        below = records["parent"] >= 0
        records["parent"][below] = ids[records["parent"][below]]
        records["parent"][0] = final[parent_of[x]]
        nodes[ids] = records
        values[ids] = sub_values
        categorical = np.flatnonzero(records["bitset_idx"] >= 0)
        if len(categorical):
            rows.append(sub_bitsets[records["bitset_idx"][categorical]])
            owners.append(ids[categorical])
    if rows:
        table = np.concatenate(rows)
        owner = np.concatenate([np.asarray(o, dtype=np.int64) for o in owners])
    else:
        table = np.zeros((0, BITSET_WORDS), dtype=BITSET_DTYPE)
        owner = np.zeros(0, dtype=np.int64)
    return nodes, values, _bitsets_as_grown(nodes, owner, table)


def _bitsets_as_grown(nodes, owner, rows):
    """The tree's bitset table as the grower writes and shares it: ``rows[k]``, the bitset of
    node ``owner[k]``'s categorical split, in the order the splits were made (``nodes``
    numbered as the grower numbers them), ``bitset_idx`` of the owners pointing into it."""
    order = np.argsort(_creation_rank(owner), kind="stable")
    table = np.ascontiguousarray(rows[order], dtype=BITSET_DTYPE).reshape(-1, BITSET_WORDS)
    nodes["bitset_idx"][owner[order]] = np.arange(len(order), dtype=nodes["bitset_idx"].dtype)
    return share_bitsets(nodes, table)


def best_first(nodes, values, bitsets, max_leaf_nodes):
    """The records of the best-first tree of at most ``max_leaf_nodes`` leaves that the grower
    grows on the rows of the tree ``nodes, values, bitsets`` (``join``'s, grown further): its
    splits in the grower's heap order, the nodes numbered as they are made (the root 0, a split
    node's children next, left then right), the nodes left on the heap made leaves, and the
    bitset rows of the splits made in the order they were made, shared as the grower shares
    them."""
    kept = [0]  # final id -> id in ``nodes``
    split_final = []
    heap = [] if nodes[0]["left"] == TREE_LEAF else [(-float(nodes[0]["improvement"]), 0)]
    while heap and len(split_final) < max_leaf_nodes - 1:
        _, final = heapq.heappop(heap)
        split_final.append(final)
        x = kept[final]
        for child in (int(nodes[x]["left"]), int(nodes[x]["right"])):
            kept.append(child)
            if nodes[child]["left"] != TREE_LEAF:
                heapq.heappush(heap, (-float(nodes[child]["improvement"]), len(kept) - 1))
    kept_ids = np.array(kept, dtype=np.int64)
    final_of = np.full(len(nodes), -1, dtype=np.int64)
    final_of[kept_ids] = np.arange(len(kept_ids))
    records = nodes[kept_ids].copy()
    made = np.zeros(len(kept_ids), dtype=bool)
    made[split_final] = True
    for name, value in {**LEAF_RECORD, "left": TREE_LEAF, "right": TREE_LEAF}.items():
        records[name][~made] = value
    records["left"][made] = final_of[records["left"][made]]
    records["right"][made] = final_of[records["right"][made]]
    records["parent"][1:] = final_of[records["parent"][1:]]
    owner = np.flatnonzero(records["bitset_idx"] >= 0)
    rows = bitsets[records["bitset_idx"][owner]]
    return records, values[kept_ids], _bitsets_as_grown(records, owner, rows)
