"""The responses' prefix tree that cross-scoring teacher-forces (response_trie.py): one node
per distinct prefix, each seeing exactly its ancestors, every scored token once, and
chunks that keep responses which begin alike together."""

from __future__ import annotations

import torch

from mirage.plugins.backend_local import response_trie

RESPONSES = [[5, 6, 7, 8], [5, 6, 9], [5, 6, 7, 8], [4], [], [5, 2]]


def test_a_shared_prefix_is_one_node():
    trie = response_trie.build(RESPONSES, torch.device("cpu"))
    # the inputs: every prefix but the whole response: (5), (5 6), (5 6 7), distinct only
    assert trie.ids.tolist() == [5, 6, 7]
    assert trie.depth.tolist() == [0, 1, 2]
    assert trie.sees.tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_every_token_after_the_first_is_scored_once_by_the_node_of_its_prefix():
    trie = response_trie.build(RESPONSES, torch.device("cpu"))
    scored = list(zip(trie.response.tolist(), trie.node.tolist(), trie.target.tolist()))
    assert scored == [(0, 0, 6), (0, 1, 7), (0, 2, 8), (1, 0, 6), (1, 1, 9), (2, 0, 6), (2, 1, 7), (2, 2, 8),
                      (5, 0, 2)]
    assert len(scored) == sum(max(len(z) - 1, 0) for z in RESPONSES)


def test_branches_see_their_own_ancestors_only():
    trie = response_trie.build([[1, 2, 3, 4], [1, 3, 3, 4]], torch.device("cpu"))
    # nodes: (1), (1 2), (1 2 3), (1 3), (1 3 3)
    assert trie.ids.tolist() == [1, 2, 3, 3, 3]
    assert trie.depth.tolist() == [0, 1, 2, 1, 2]
    assert trie.sees[4].tolist() == [True, False, False, True, True]
    assert trie.sees[2].tolist() == [True, True, True, False, False]


def test_chunks_cover_every_response_once_within_the_node_budget():
    responses = [[3, 1, 2], [9, 9, 9, 9], [3, 1, 5], [9, 9, 8], [7], [3, 1, 2, 6], []]
    chunks = response_trie.chunks(responses, nodes=4)
    assert sorted(r for chunk in chunks for r in chunk) == list(range(len(responses)))
    for chunk in chunks:
        assert response_trie.build([responses[r] for r in chunk], torch.device("cpu")).size <= 4
    # lexicographic: the three responses that begin 3 1 share a chunk (3 nodes: 3, 3 1, 3 1 2)
    assert any({0, 2, 5} <= set(chunk) for chunk in chunks)


def test_a_response_longer_than_the_budget_goes_alone():
    chunks = response_trie.chunks([[1, 2, 3, 4, 5, 6], [1, 2]], nodes=2)
    assert sorted(map(sorted, chunks)) == [[0], [1]]
