"""torchrun (torch.distributed.run), whose variables are the ones every other launcher maps onto."""

from __future__ import annotations

import os
from collections.abc import Mapping

from lifecycle.launchers._base import Launcher


class Torchrun(Launcher):
    """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT as set; the elastic agent's run id."""

    name, task, rank_variable, size_variable = "torchrun", "rank", "RANK", "WORLD_SIZE"
    evidence = ("RANK", "LOCAL_RANK")

    def implied(self, environ: Mapping[str, str]) -> dict[str, str]:
        return {}

    def run_id(self, environ: Mapping[str, str]) -> str | None:
        run_id = environ.get("TORCHELASTIC_RUN_ID")
        return run_id if run_id and run_id != "none" else None

    def unknown(self, environ: Mapping[str, str]) -> str | None:
        return None  # RANK without WORLD_SIZE: the generic refusal names it


LAUNCHED = "LIFECYCLE_LAUNCHED"
"""Set in the ranks `lifecycle run --nproc` launches: what the launcher said before, they do not
repeat, and their first record says `lifecycle run` started them (the audit then expects its
`launcher-NNNNN.jsonl`)."""


def lifecycle_launched(environ: Mapping[str, str] | None = None) -> bool:
    """`lifecycle run --nproc` started this process (through torchrun)."""
    return (os.environ if environ is None else environ).get(LAUNCHED) == "1"


def restart_count(environ: Mapping[str, str] | None = None) -> int | None:
    """How many times torchrun's agent restarted the worker group (`--max-restarts`); None outside
    an elastic launch."""
    count = (os.environ if environ is None else environ).get("TORCHELASTIC_RESTART_COUNT", "")
    return int(count) if count.isdigit() else None


def agent_store(environ: Mapping[str, str] | None = None) -> bool:
    """torchrun's agent hosts the rendezvous store (every rank is a client of it)."""
    return (os.environ if environ is None else environ).get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def inside_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """This process is one torchrun started (so it must not launch torchrun again, and ends with it)."""
    env = os.environ if environ is None else environ
    return "LOCAL_RANK" in env or "TORCHELASTIC_RUN_ID" in env
