"""The responses of one cross-scoring chunk as a prefix tree: a token prefix that several
responses share is teacher-forced once per context, not once per response.

Teacher forcing response ``z`` after a context needs the model's output at every prefix
``z[:t]`` (``1 <= t < len(z)``): its logits predict ``z[t]`` (the context's own last logits
predict ``z[0]``). Under causal attention that output depends on the context and the
prefix alone, so responses that begin alike need it once: each distinct prefix is a node,
whose input is the prefix's last token at position ``len(prefix) - 1`` after the context,
and which attends to the context and to its ancestors (the nodes of its shorter prefixes)
and itself. A rollout group's reasonings share long beginnings (they describe one room),
so a first-turn batch of 128 reasonings of about 26 tokens is about 600 nodes rather than
3,300 token rows (bench/diagnostics.py prints both counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Trie:
    """Nodes ``[S]`` and the scored tokens ``[T]`` (every response token but the first)."""

    ids: torch.Tensor  # [S] each node's input token
    depth: torch.Tensor  # [S] its position after the context (0: the response's first token)
    sees: torch.Tensor  # [S, S] bool: node s sees node a when a is s or one of its ancestors
    node: torch.Tensor  # [T] the node whose output predicts each scored token
    target: torch.Tensor  # [T] the scored token
    response: torch.Tensor  # [T] the response (index into the chunk) it belongs to

    @property
    def size(self) -> int:
        return len(self.ids)


class Builder:
    """Adds responses one by one; ``cost`` tells how many nodes a response would add."""

    def __init__(self):
        self.index: dict[tuple[int, int], int] = {}  # (parent node or -1, token) -> node
        self.paths: list[list[int]] = []
        self.ids: list[int] = []
        self.scored: list[tuple[int, int, int]] = []  # (node, target, response)
        self.responses = 0

    def cost(self, response: list[int]) -> int:
        node: int | None = -1
        for t, token in enumerate(response[:-1]):
            node = self.index.get((node, token))
            if node is None:  # this prefix and every longer one are new
                return len(response) - 1 - t
        return 0

    def add(self, response: list[int]) -> None:
        node = -1
        for t, token in enumerate(response[:-1]):
            key = (node, token)
            if key not in self.index:
                self.index[key] = len(self.ids)
                self.paths.append((self.paths[node] if node >= 0 else []) + [len(self.ids)])
                self.ids.append(token)
            node = self.index[key]
            self.scored.append((node, response[t + 1], self.responses))
        self.responses += 1

    def build(self, device: torch.device) -> Trie:
        sees = torch.zeros(len(self.ids), len(self.ids), dtype=torch.bool)
        for node, path in enumerate(self.paths):
            sees[node, path] = True
        node, target, response = (torch.tensor(list(column), dtype=torch.long, device=device)
                                  for column in (zip(*self.scored) if self.scored else ((), (), ())))
        ids = torch.tensor(self.ids, dtype=torch.long, device=device)
        return Trie(ids, torch.tensor([len(p) - 1 for p in self.paths], dtype=torch.long, device=device),
                    sees.to(device), node, target, response)


def chunks(responses: list[list[int]], nodes: int) -> list[list[int]]:
    """Indices of ``responses`` in chunks of at most ``nodes`` nodes each (a response whose
    own prefixes are more goes alone), in lexicographic order so that responses that begin
    alike share a chunk."""
    order = sorted(range(len(responses)), key=lambda r: responses[r])
    out: list[list[int]] = []
    builder, current = Builder(), []
    for r in order:
        if current and len(builder.ids) + builder.cost(responses[r]) > nodes:
            out.append(current)
            builder, current = Builder(), []
        builder.add(responses[r])
        current.append(r)
    if current:
        out.append(current)
    return out


def build(responses: list[list[int]], device: torch.device) -> Trie:
    builder = Builder()
    for response in responses:
        builder.add(response)
    return builder.build(device)
