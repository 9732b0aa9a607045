"""What the engine and the phases share: the `Runtime` record, the phase protocol, typed engine
`Options`, and the process's identity in the job. Imports neither torch nor megatron."""

from __future__ import annotations

from lifecycle.runtime._identity import adopt_launcher_identity
from lifecycle.runtime._identity import new_run_id as new_run_id
from lifecycle.runtime._identity import rank_of as rank_of
from lifecycle.runtime._identity import run_id_from_env as run_id_from_env
from lifecycle.runtime._identity import world_size_of as world_size_of
from lifecycle.runtime._phases import Around as Around
from lifecycle.runtime._phases import Entry as Entry
from lifecycle.runtime._phases import Phase as Phase
from lifecycle.runtime._phases import Phases as Phases
from lifecycle.runtime._phases import PhaseSet as PhaseSet
from lifecycle.runtime._phases import Work as Work
from lifecycle.runtime._protocol import Closeable as Closeable
from lifecycle.runtime._protocol import Imports as Imports
from lifecycle.runtime._protocol import ModelChunk as ModelChunk
from lifecycle.runtime._protocol import Optimizer as Optimizer
from lifecycle.runtime._protocol import Options as Options
from lifecycle.runtime._protocol import OptionValues as OptionValues
from lifecycle.runtime._protocol import PhaseContext as PhaseContext
from lifecycle.runtime._protocol import Runtime as Runtime
from lifecycle.runtime._protocol import Slot as Slot
from lifecycle.runtime._protocol import Watch as Watch
from lifecycle.runtime._providers import BuildsModel as BuildsModel
from lifecycle.runtime._providers import ConfiguresModel as ConfiguresModel
from lifecycle.runtime._providers import GivenProvider as GivenProvider
from lifecycle.runtime._providers import ModelInputs as ModelInputs
from lifecycle.runtime._providers import ModelProvider as ModelProvider
from lifecycle.runtime._providers import ProvidesModel as ProvidesModel

__all__ = [
    "adopt_launcher_identity",
]
