"""A scripted OpenAI-compatible embeddings endpoint (`POST /v1/embeddings`).

Its "model" is a declared table of synonyms: every word of one group shares an axis, any
other word gets an axis of its own (hashed), and a text's vector is its normalised bag of
axes. So "car" and "automobile" are close when the script says they are synonyms, which is
what hybrid ranking must exploit and full-text search cannot. It can be told to fail.
"""

from __future__ import annotations

import hashlib
import math
import re

from tests.e2e.scripted_server import RecordedRequest, Reply, ScriptedServer

DIMENSIONS = 256
WORD = re.compile(r"\w+")


class FakeEmbeddings(ScriptedServer):
    def __init__(self, synonyms: list[set[str]] = (), model: str = "fake-embed-1"):
        super().__init__()
        self.model = model
        self.failing = False
        self._axis = {word: index for index, group in enumerate(synonyms) for word in group}
        self._groups = len(synonyms)

    def vector(self, text: str) -> list[float]:
        values = [0.0] * DIMENSIONS
        for word in WORD.findall(text.lower()):
            stem = word[:-1] if word.endswith("s") and len(word) > 3 else word
            axis = self._axis.get(word, self._axis.get(stem))
            if axis is None:
                digest = hashlib.sha256(stem.encode()).digest()
                axis = self._groups + int.from_bytes(digest[:4]) % (DIMENSIONS - self._groups)
            values[axis] += 1.0
        norm = math.sqrt(sum(v * v for v in values)) or 1.0
        return [v / norm for v in values]

    def embedded_texts(self) -> list[str]:
        return [text for r in self.requests if isinstance(r.body, dict)
                for text in r.body.get("input", [])]

    def respond(self, request: RecordedRequest, reply: Reply) -> None:
        if self.failing:
            reply.json(500, {"error": {"message": "scripted failure", "type": "server_error"}})
            return
        if request.method != "POST" or request.path != "/v1/embeddings":
            reply.json(404, {"error": {"message": f"no route {request.path}"}})
            return
        body = request.body if isinstance(request.body, dict) else {}
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if body.get("model") != self.model or not isinstance(texts, list):
            reply.json(400, {"error": {"message": "expected model and input"}})
            return
        reply.json(200, {"object": "list", "model": self.model, "data": [
            {"object": "embedding", "index": i, "embedding": self.vector(t)}
            for i, t in enumerate(texts)]})
