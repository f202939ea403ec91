"""Webhook secrets at rest: sealed with AES-256-GCM under a key the store never holds.

Signing needs the raw secret, so a hash cannot serve; instead each secret (with an A2A
config's token and credentials) is encrypted under COGMESH_WEBHOOK_SECRETS_KEY_FILE, a
file holding 32 random bytes in base64 (`openssl rand -base64 32`), mounted from the
platform's secret store like the API keys file. Redis then holds only ciphertext, bound
to its webhook (the id is the associated data, so a sealed secret copied onto another
webhook does not open). Without the file, the memory store seals under a key made at
start (its webhooks die with the process anyway), and the Redis store refuses to create
webhooks. Secrets never reach a log line or a response after CreateWebhook.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from services.kit.errors import FailedPrecondition

NONCE_BYTES = 12


class Sealer:
    def __init__(self, key: bytes | None):
        self._aead = AESGCM(key) if key is not None else None

    @classmethod
    def from_file(cls, path: Path | None, ephemeral: bool) -> Sealer:
        """The key of `path`; without one, a random key when `ephemeral` (in-process store), else none."""
        if path is None:
            return cls(AESGCM.generate_key(bit_length=256) if ephemeral else None)
        try:
            key = base64.b64decode(path.read_text().strip(), validate=True)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"sessions: cannot read the webhook secrets key {path}: {exc}") from exc
        if len(key) != 32:
            raise SystemExit(f"sessions: the webhook secrets key {path} must hold 32 bytes in base64, not {len(key)}")
        return cls(key)

    def _ready(self) -> AESGCM:
        if self._aead is None:
            raise FailedPrecondition(
                "webhooks need COGMESH_WEBHOOK_SECRETS_KEY_FILE (32 random bytes, base64) on the sessions service "
                "when sessions live in Redis: their secrets are stored encrypted under it"
            )
        return self._aead

    def seal(self, webhook_id: str, secrets: dict[str, str]) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._ready().encrypt(nonce, json.dumps(secrets).encode(), webhook_id.encode())

    def open(self, webhook_id: str, sealed: bytes) -> dict[str, str]:
        opened = self._ready().decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], webhook_id.encode())
        value: dict[str, str] = json.loads(opened)
        return value
