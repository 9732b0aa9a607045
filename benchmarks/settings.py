"""Cost of MODEL_BUILT's settings check (`bindings.check_settings`), against MODEL_BUILT itself.

    python benchmarks/settings.py [--rounds 7] [--repeat 50]

2 gloo ranks (spawned, the CPU rehearsal), tiny-gpt with tp=2. For each shipped provider (gpt,
copying, gpt-builder, hybrid-builder) and each round, a lifecycle goes to MODEL_BUILT; the check's own
`duration_s` (its `settings_checked` record) and MODEL_BUILT's (`transition_completed`) are read from
the rank's log. Then, on the built model, the check alone runs `--repeat` times (asking again from the
RunConfig included) for a steady figure. Printed per provider: medians over rounds and ranks, the
spread (min-max), the ratio check / MODEL_BUILT, and the load average. Target: under 1 s, and a small
fraction of MODEL_BUILT.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROVIDERS = ("gpt", "copying", "gpt-builder", "hybrid-builder")


def _provider(name: str) -> Any:
    from lifecycle.core_entry.providers import PROVIDERS as SHIPPED
    from lifecycle.core_entry.providers import GPTBuilder, HybridBuilder

    return {"gpt-builder": GPTBuilder, "hybrid-builder": HybridBuilder}.get(name, lambda: SHIPPED[name])()


def _durations(log: Path) -> tuple[float, float]:
    import orjson

    records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    check = next(r["duration_s"] for r in records if r["event"] == "settings_checked")
    built = next(
        r["duration_s"] for r in records if r["event"] == "transition_completed" and r.get("dest") == "MODEL_BUILT"
    )
    return float(check), float(built)


def _alone(lc: Any, repeat: int) -> float:
    import bindings
    from lifecycle.core_entry.model_built import asked_for

    rt = lc.runtime
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        asked = asked_for(rt.config, lc.provider, training=True)
        bindings.check_settings(list(rt.model), asked, optimizer=rt.optimizer, provider_config=rt.provider_config)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rank_work(rounds: int, repeat: int) -> dict[str, list[tuple[float, float, float]]]:
    from lifecycle import Lifecycle, RunConfig
    from states import State

    out: dict[str, list[tuple[float, float, float]]] = {}
    for name in PROVIDERS:
        for _ in range(rounds):
            log_dir = tempfile.mkdtemp(prefix="bench-settings-")
            with Lifecycle(RunConfig.preset("tiny-gpt", ["parallel.tp=2"]), _provider(name), log_dir) as lc:
                lc.advance_to(State.MODEL_BUILT)
                alone = _alone(lc, repeat)
                log = lc.log_path
            check, built = _durations(Path(str(log)))
            out.setdefault(name, []).append((check, built, alone))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    from lifecycle.launchers.local import run_ranks

    load = os.getloadavg()[0]
    ranks = run_ranks(rank_work, 2, args.rounds, args.repeat, timeout_s=1800)
    print(f"settings check at MODEL_BUILT, 2 ranks, tiny-gpt tp=2, {args.rounds} rounds; load {load:.2f}")
    print(f"{'provider':<16}{'check ms':>10}{'(spread)':>18}{'MODEL_BUILT ms':>16}{'ratio':>8}{'alone ms':>10}")
    for name in PROVIDERS:
        rows = [row for rank in ranks for row in rank[name]]
        check = [r[0] * 1e3 for r in rows]
        built = [r[1] * 1e3 for r in rows]
        alone = [r[2] * 1e3 for r in rows]
        ratio = statistics.median(c / b for c, b in zip(check, built, strict=True))
        spread = f"{min(check):.2f}-{max(check):.2f}"
        print(
            f"{name:<16}{statistics.median(check):>10.2f}{spread:>18}{statistics.median(built):>16.1f}"
            f"{ratio:>8.4f}{statistics.median(alone):>10.2f}"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}; target: check < 1000 ms at 2 ranks")


if __name__ == "__main__":
    main()
