"""`MegatronLMCall`: the arguments of one `pretrain(...)` call, which the drop-in's phases
(`_phases.py`), its DISTRIBUTED work (`_distributed.py`) and its training (`_train.py`) all read.
Its own module, so that none of them imports another for it."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from lifecycle.runtime import GivenProvider

if TYPE_CHECKING:
    import torch
    from megatron.core.enums import ModelType
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator
    from megatron.core.process_groups_config import MultiModuleProcessGroupCollection, ProcessGroupCollection
    from megatron.training.config.container import PretrainConfigContainer
    from torch.distributed import Store
    from torch.utils.data import Dataset

    DatasetProvider: TypeAlias = "Callable[..., tuple[Dataset | None, Dataset | None, Dataset | None]]"
    """`train_valid_test_dataset_provider(train_val_test_num_samples[, vp_stage=])`: the train,
    validation and test datasets (None where a rank or run has none)."""
    Reported: TypeAlias = "dict[str, torch.Tensor]"
    LossFunc: TypeAlias = (
        "Callable[[torch.Tensor], tuple[torch.Tensor, Reported] | tuple[torch.Tensor, torch.Tensor, Reported]]"
    )
    """What `forward_step_func` returns beside the output: the output's loss, (the number of tokens,)
    and the values to report by name, as megatron's schedule unpacks them."""
    ForwardStep: TypeAlias = "Callable[..., tuple[torch.Tensor, LossFunc]]"
    """`forward_step_func(data_iterator, model)`: the model's output on the next batch and its loss function."""


@dataclass(kw_only=True)
class MegatronLMCall:
    """The arguments of one `pretrain(...)` call, as Megatron-LM's signature names them."""

    cfg_container: PretrainConfigContainer
    train_valid_test_dataset_provider: DatasetProvider
    model_type: ModelType
    forward_step_func: ForwardStep
    model_provider: GivenProvider = None
    """Any shape `_providers.problem` accepts (checked at VALIDATED), or None."""
    process_non_loss_data_func: Callable[..., None] | None = None
    get_embedding_ranks: Callable[..., list[int]] | None = None
    get_position_embedding_ranks: Callable[..., list[int]] | None = None
    non_loss_data_func: Callable[..., object] | None = None
    store: Store | None = None
    p2p_communicator: P2PCommunicator | None = None
    pg_collection: ProcessGroupCollection | MultiModuleProcessGroupCollection | None = None
    skip_model_parallel_init: bool = False
    args: Namespace = field(default_factory=Namespace)
    """Megatron-LM's arguments (`driver._megatron_args`)."""
    args_validated: bool = False
    checkpointing_context: dict[str, object] = field(default_factory=dict)
    """Megatron-LM's `checkpointing_context`: one per call, filled by its checkpoint save and load."""
