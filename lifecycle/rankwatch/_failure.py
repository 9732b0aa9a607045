"""What a failed rank publishes in the store (`ranks/failure/<rank>`, and `ranks/first` for the first
writer), and how a verdict names ranks. Used by the rank watch (_watch.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from torch.distributed import Store


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """What a failed rank publishes. `kind`: exception, signal or timeout; `lost` when another rank names
    one that is gone or stood still (it writes no record of its own)."""

    rank: int
    state: str
    error: str
    kind: str

    def encode(self) -> bytes:
        return orjson.dumps({"rank": self.rank, "state": self.state, "error": self.error, "kind": self.kind})

    @classmethod
    def decode(cls, raw: bytes) -> Failure:
        data = orjson.loads(raw)
        return cls(rank=int(data["rank"]), state=str(data["state"]), error=str(data["error"]), kind=str(data["kind"]))


def rank_list(ranks: list[int]) -> str:
    """'rank 1' or 'ranks 1, 3'."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def read_first(store: Store) -> Failure | None:
    """The first failure published in this job's store, or None (`first` is made empty, before any
    failure, by the last rank to check in: a node leader's poll reads it with one `multi_get`)."""
    raw = store.get("first") if store.check(["first"]) else b""
    return Failure.decode(raw) if raw else None
