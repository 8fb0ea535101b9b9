"""The seed of a reply: from the canonical JSON of its request, never Python's ``hash``.

Text (:mod:`.text`) and image (:mod:`.image`) replies both draw every choice from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _derive_seed(kind: str, payload: Mapping[str, Any]) -> int:
    """A stable 64-bit seed from the canonical JSON of ``payload`` (never Python's ``hash``)."""
    canonical = json.dumps(
        {"kind": kind, **_plain(payload)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=repr,
    )
    return int.from_bytes(hashlib.sha256(canonical.encode("utf-8")).digest()[:8], "big")
