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
import re
from typing import Any

import numpy as np

from tests.fakes.providers import FakeOpenAI, Request

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


class FakeEmbeddings(FakeOpenAI):
    """The OpenAI fake (chat completions) with POST /v1/embeddings beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []  # the embeddings requests' JSON bodies
        self._failures: list[tuple[int, str]] = []

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def fail_next(self, status: int, message: str = "the embeddings backend is down", times: int = 1) -> None:
        self._failures.extend([(status, message)] * times)

    def answer(self, request: Request) -> tuple[int, Any] | None:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/embeddings"):
            return None
        payload = request.json()
        self.requests.append(payload)
        if self._failures:
            status, message = self._failures.pop(0)
            return status, {"error": {"message": message, "type": "server_error", "code": None, "param": None}}
        texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        as_base64 = payload.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = embed(text)
            encoded: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode() if as_base64 else vector.tolist()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(text.split()) for text in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return 200, {"object": "list", "data": data, "model": payload["model"], "usage": usage}
