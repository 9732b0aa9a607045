"""Providers as users write them, loaded by `--provider provider_cases:NAME` (module path) and
`--provider tests/integration/provider_cases.py:NAME` (file path): our shape, Megatron-LM's shape
(config from globals, or from a closure), and the bad ones that megatron's DDP wrap cannot take."""

from __future__ import annotations

import copy
from typing import Any

VOCAB = 1024  # the tiny-gpt preset's 1000 tokens padded to a multiple of 128


def ours(config: Any, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: Any) -> Any:
    from lifecycle.core_entry.providers import gpt_provider

    return gpt_provider(config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage, inputs=inputs)


def _gpt(config: Any, pre_process: bool, post_process: bool, vp_stage: int | None = None) -> Any:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    return GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=VOCAB,
        max_sequence_length=32,
        pre_process=pre_process,
        post_process=post_process,
        vp_stage=vp_stage,
    )


def core_transformer_config_from_args() -> Any:
    """What Megatron-LM's `pretrain_gpt.py` gets from `get_args()`: a TransformerConfig of its own."""
    from lifecycle import RunConfig
    from lifecycle.core_entry.providers import transformer_config

    return transformer_config(RunConfig.preset("tiny-gpt"))


def model_provider(pre_process: bool = True, post_process: bool = True, vp_stage: int | None = None) -> Any:
    """Megatron-LM's shape; the config comes from module globals, as `get_args()` gives it there."""
    return _gpt(core_transformer_config_from_args(), pre_process, post_process, vp_stage)


def _make_closure_provider() -> Any:
    config = core_transformer_config_from_args  # called on first use: it imports megatron
    built: list[Any] = []

    def model_provider(pre_process: bool = True, post_process: bool = True) -> Any:
        if not built:
            built.append(config())
        return _gpt(built[0], pre_process, post_process)

    return model_provider


closure_provider = _make_closure_provider()


def _module_class() -> Any:
    import torch

    return torch.nn.Module


def hides_config(config: Any, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: Any) -> Any:
    """A wrapper that keeps the model as `.net`: megatron cannot reach `.config`."""

    class Wrapper(_module_class()):  # type: ignore[misc]
        def __init__(self, net: Any) -> None:
            super().__init__()
            self.net = net

    return Wrapper(ours(config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage, inputs=inputs))


def returns_list(config: Any, **kwargs: Any) -> Any:
    return [ours(config, **kwargs)]


def returns_tuple(config: Any, **kwargs: Any) -> Any:
    return (ours(config, **kwargs),)


def returns_module_list(config: Any, **kwargs: Any) -> Any:
    import torch

    return torch.nn.ModuleList([ours(config, **kwargs)])


def returns_none(config: Any, **kwargs: Any) -> Any:
    return None


def two_deep_copying(config: Any, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: Any) -> Any:
    """Outer(.module=Inner(.module=GPTModel)) on a deep copy of the config: megatron reaches the
    copy through `.module` twice."""
    base = _module_class()

    class Wrap(base):  # type: ignore[misc, valid-type]
        def __init__(self, module: Any) -> None:
            super().__init__()
            self.module = module

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return self.module(*args, **kwargs)

        def set_input_tensor(self, tensor: Any) -> None:
            self.module.set_input_tensor(tensor)

    gpt = ours(
        copy.deepcopy(config), pre_process=pre_process, post_process=post_process, vp_stage=vp_stage, inputs=inputs
    )
    return Wrap(Wrap(gpt))
