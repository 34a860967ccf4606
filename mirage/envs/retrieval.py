"""BM25 retrieval over a small local corpus (the ``bm25s`` library; no server, no download)."""

from __future__ import annotations

import bm25s


class BM25Index:
    """Lowercased word tokens, English stop words removed, Lucene BM25 (k1 1.5, b 0.75)."""

    def __init__(self, texts: list[str]):
        if not texts:
            raise ValueError("a BM25 index needs at least one document")
        self.texts = list(texts)
        self._retriever = bm25s.BM25()
        self._retriever.index(self._tokens(self.texts), show_progress=False)
        self._vocabulary = set(self._retriever.vocab_dict)

    @staticmethod
    def _tokens(texts: list[str]) -> list[list[str]]:
        return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)

    def search(self, query: str, k: int) -> list[int]:
        """Indices of the best ``k`` documents with a positive score, best first (ties in
        index order, so results are deterministic)."""
        words = [w for w in self._tokens([query])[0] if w in self._vocabulary]
        if not words:
            return []
        k = min(k, len(self.texts))
        documents, scores = self._retriever.retrieve([words], k=k, show_progress=False, n_threads=1)
        ranked = sorted(zip(documents[0].tolist(), scores[0].tolist()), key=lambda ds: (-ds[1], ds[0]))
        return [int(d) for d, s in ranked if s > 0]
