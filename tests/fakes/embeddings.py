"""A local server speaking the OpenAI embeddings wire format (POST /v1/embeddings).

Its vectors are deterministic and carry meaning the way real ones do, in miniature:
each word counts towards the dimension of its concept (`CONCEPTS` maps synonyms to one
concept; any other word hashes to a dimension of its own), so "espresso" and "coffee"
are close while sharing no letters, which BM25 cannot see. It answers as OpenAI does:
floats, or base64 of little-endian float32 when the request asks `encoding_format:
base64` (the SDK does by default); usage; and scripted failures (`fail_next`) with
OpenAI's error body.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import numpy as np

from tests.fakes.http import HttpServer, Request, Response

DIMENSIONS = 64
CONCEPTS = {
    "coffee": 1,
    "espresso": 1,
    "latte": 1,
    "cappuccino": 1,
    "tea": 2,
    "matcha": 2,
    "dog": 3,
    "puppy": 3,
    "canine": 3,
    "cat": 4,
    "kitten": 4,
}


def embed(text: str) -> np.ndarray:
    vector = np.zeros(DIMENSIONS, dtype=np.float32)
    for word in re.findall(r"\w+", text.lower()):
        dimension = CONCEPTS.get(word)
        if dimension is None:
            dimension = 8 + int(hashlib.sha256(word.encode()).hexdigest(), 16) % (DIMENSIONS - 8)
        vector[dimension] += 1.0
    return vector


class FakeEmbeddings:
    def __init__(self) -> None:
        self.server = HttpServer(self._handle)
        self.requests: list[dict[str, Any]] = []
        self._failures: list[tuple[int, str]] = []

    @property
    def url(self) -> str:
        return f"{self.server.url}/v1"

    def fail_next(self, status: int, message: str = "the embeddings backend is down", times: int = 1) -> None:
        self._failures.extend([(status, message)] * times)

    async def __aenter__(self) -> FakeEmbeddings:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()

    async def _handle(self, request: Request) -> Response:
        if request.method != "POST" or not request.path.endswith("/embeddings"):
            return Response(404, body=b'{"error": {"message": "not found"}}')
        payload = request.json()
        self.requests.append(payload)
        if self._failures:
            status, message = self._failures.pop(0)
            error: dict[str, Any] = {"error": {"message": message, "type": "server_error", "code": None, "param": None}}
            return Response(status, headers={"content-type": "application/json"}, body=json.dumps(error).encode())
        texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        as_base64 = payload.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = embed(text)
            encoded: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode() if as_base64 else vector.tolist()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(text.split()) for text in texts)
        body: dict[str, Any] = {
            "object": "list",
            "data": data,
            "model": payload["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return Response(200, headers={"content-type": "application/json"}, body=json.dumps(body).encode())
