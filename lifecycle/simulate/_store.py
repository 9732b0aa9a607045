"""A counting in-memory store: what the lifecycle's rank watch asks of the job's store host, counted
by phase, by operation, by connection and by rank, without a server.

    host = StoreHost()
    store = host.connect(rank)           # one connection (a TCPStore client of the real job)
    watcher = store.clone()              # another connection, counted as such
    host.begin("steady")                 # later operations count in that phase

The connections keep one key space, as clients of one TCPStore do, with TCPStore's semantics for
`add`, `compare_set`, `check` and `multi_get`. Nothing blocks: `wait` (and `get` / `multi_get` of an
absent key) returns at once when the keys exist and raises TimeoutError otherwise, so a driver must
order the ranks' calls as the real job's would meet (every rank registers before any waits).
Bytes are what crosses the connection: key names, values sent and values returned.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass(slots=True)
class Tally:
    """What the host served in one phase: operations by kind, keys named, bytes, connections opened,
    and per rank its operations and bytes (ranks with none are absent)."""

    ops: Counter[str] = field(default_factory=Counter)
    keys: int = 0
    bytes: int = 0
    connections: int = 0
    rank_ops: dict[int, int] = field(default_factory=dict)
    rank_bytes: dict[int, int] = field(default_factory=dict)
    rank_connections: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def count(self, rank: int, kind: str, keys: int, size: int) -> None:
        self.ops[kind] += 1
        self.keys += keys
        self.bytes += size
        self.rank_ops[rank] = self.rank_ops.get(rank, 0) + 1
        self.rank_bytes[rank] = self.rank_bytes.get(rank, 0) + size


class StoreHost:
    """The store's server: one key space, every connection to it, and a `Tally` per phase."""

    def __init__(self, phase: str = "start") -> None:
        self.data: dict[str, bytes] = {}
        self.phases: dict[str, Tally] = {}
        self.open = 0
        self.tally = self.begin(phase)

    def begin(self, phase: str) -> Tally:
        """Count from now on in `phase` (a phase begun again goes on counting where it stopped)."""
        self.tally = self.phases.setdefault(phase, Tally())
        return self.tally

    def connect(self, rank: int) -> CountingStore:
        """A new connection of `rank` (counted in the current phase)."""
        self.open += 1
        self.tally.connections += 1
        self.tally.rank_connections[rank] = self.tally.rank_connections.get(rank, 0) + 1
        return CountingStore(self, rank)


def _b(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class CountingStore:
    """One connection to a `StoreHost`, owned by `rank`: `torch.distributed.Store`'s methods that the
    lifecycle uses, each counted at the host."""

    def __init__(self, host: StoreHost, rank: int) -> None:
        self.host, self.rank = host, rank
        self.timeout = timedelta(seconds=300)

    def _count(self, kind: str, keys: int, size: int) -> None:
        self.host.tally.count(self.rank, kind, keys, size)

    def clone(self) -> CountingStore:
        return self.host.connect(self.rank)

    def set_timeout(self, timeout: timedelta) -> None:
        self.timeout = timeout

    def set(self, key: str, value: str | bytes) -> None:
        data = _b(value)
        self._count("set", 1, len(key) + len(data))
        self.host.data[key] = data

    def get(self, key: str) -> bytes:
        value = self._present("get", [key])[0]
        self._count("get", 1, len(key) + len(value))
        return value

    def add(self, key: str, amount: int) -> int:
        total = int(self.host.data.get(key, b"0")) + amount
        self.host.data[key] = str(total).encode()
        self._count("add", 1, len(key) + 16)
        return total

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        want, new = _b(expected), _b(desired)
        current = self.host.data.get(key)
        if (current is None and not want) or current == want:
            self.host.data[key] = new
            current = new
        elif current is None:
            current = want
        self._count("compare_set", 1, len(key) + len(want) + len(new) + len(current))
        return current

    def check(self, keys: list[str]) -> bool:
        self._count("check", len(keys), sum(map(len, keys)) + 1)
        return all(k in self.host.data for k in keys)

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        self._present("wait", keys)
        self._count("wait", len(keys), sum(map(len, keys)))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        values = self._present("multi_get", keys)
        self._count("multi_get", len(keys), sum(map(len, keys)) + sum(map(len, values)))
        return values

    def multi_set(self, keys: list[str], values: list[str | bytes]) -> None:
        data = [_b(v) for v in values]
        self._count("multi_set", len(keys), sum(map(len, keys)) + sum(map(len, data)))
        self.host.data.update(zip(keys, data, strict=True))

    def append(self, key: str, value: str | bytes) -> None:
        data = _b(value)
        self._count("append", 1, len(key) + len(data))
        self.host.data[key] = self.host.data.get(key, b"") + data

    def delete_key(self, key: str) -> bool:
        self._count("delete_key", 1, len(key))
        return self.host.data.pop(key, None) is not None

    def num_keys(self) -> int:
        self._count("num_keys", 0, 8)
        return len(self.host.data)

    def _present(self, kind: str, keys: list[str]) -> list[bytes]:
        """The values of `keys`, or TimeoutError (counted) where a real client would block."""
        try:
            return [self.host.data[k] for k in keys]
        except KeyError as missing:
            self._count(kind, len(keys), sum(map(len, keys)))
            raise TimeoutError(f"key {missing} is not set: a real store would wait {self.timeout}") from None
