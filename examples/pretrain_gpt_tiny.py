"""A `pretrain_gpt.py`-style Megatron-LM script: Megatron-LM's GPT forward step and mock-data
dataset provider, the null tokenizer, a tiny GPT. The one change from Megatron-LM's own script is
the import of `pretrain`.

    torchrun --nproc-per-node 2 pretrain_gpt_tiny.py --tensor-model-parallel-size 1
"""

from functools import partial

import torch
from megatron.core import mpu
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
from megatron.core.enums import ModelType
from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
from megatron.core.utils import get_batch_on_this_tp_rank
from megatron.training import get_args, get_timers, print_rank_0
from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args
from megatron.training.arguments import parse_and_validate_args
from megatron.training.utils import is_first_or_last_pipeline_stage

from lifecycle.lm_dropin import pretrain  # was: from megatron.training import pretrain

TINY_GPT = [
    "--num-layers",
    "2",
    "--hidden-size",
    "64",
    "--num-attention-heads",
    "4",
    "--seq-length",
    "32",
    "--max-position-embeddings",
    "32",
    "--micro-batch-size",
    "2",
    "--global-batch-size",
    "4",
    "--train-iters",
    "5",
    "--lr",
    "0.001",
    "--seed",
    "1234",
    "--mock-data",
    "--split",
    "1,0,0",
    "--tokenizer-type",
    "NullTokenizer",
    "--vocab-size",
    "1000",
    "--transformer-impl",
    "local",
    "--no-gradient-accumulation-fusion",
    "--distributed-backend",
    "gloo",
    "--eval-iters",
    "0",
    "--eval-interval",
    "1000",
    "--num-workers",
    "0",
    "--log-interval",
    "1",
    "--no-persist-layer-norm",
    "--no-masked-softmax-fusion",
    "--no-bias-dropout-fusion",
    "--no-rope-fusion",
    "--no-bias-gelu-fusion",
]


def get_batch(data_iterator):
    """The batch on this rank: tensor-parallel rank 0 reads it, the others receive it."""
    args = get_args()
    if not is_first_or_last_pipeline_stage(None):
        return None, None, None, None, None
    batch = {}
    if mpu.get_tensor_model_parallel_rank() == 0:
        batch = {k: v.cuda(non_blocking=True) for k, v in next(data_iterator).items() if v is not None}
    batch = get_batch_on_this_tp_rank(
        batch,
        broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
        broadcast_group=mpu.get_tensor_model_parallel_group(),
        micro_batch_size=args.micro_batch_size,
        seq_length=args.seq_length,
        tp_rank=mpu.get_tensor_model_parallel_rank(),
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        is_pipeline_first_stage=mpu.is_pipeline_first_stage(),
        is_pipeline_last_stage=mpu.is_pipeline_last_stage(),
        create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
        has_cu_seqlens=False,
        is_hybrid_cp=False,
        cp_size=1,
        mtp_on_this_rank=False,
    )
    return (batch["tokens"], batch["labels"], batch["loss_mask"], batch["attention_mask"], batch["position_ids"])


def loss_func(loss_mask, output_tensor):
    """Sum of the token losses, the token count, and the report Megatron-LM averages."""
    losses = output_tensor.view(-1).float()
    loss_mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * loss_mask)
    num_tokens = loss_mask.sum().clone().detach().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}


def forward_step(data_iterator, model):
    """Megatron-LM's GPT forward step."""
    timers = get_timers()
    timers("batch-generator", log_level=2).start()
    tokens, labels, loss_mask, attention_mask, position_ids = get_batch(data_iterator)
    timers("batch-generator").stop()
    output_tensor = model(tokens, position_ids, attention_mask, labels=labels, loss_mask=loss_mask)
    return output_tensor, partial(loss_func, loss_mask)


def train_valid_test_datasets_provider(train_val_test_num_samples):
    """Mock GPT datasets, built on tensor-parallel rank 0 of the first and last stages."""
    args = get_args()
    config = GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=None,
        blend_per_split=None,
        split=args.split,
        path_to_cache=None,
        tokenizer=build_tokenizer(args),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=args.create_attention_mask_in_dataloader,
        mid_level_dataset_surplus=0.005,
    )
    print_rank_0("> building mock GPT datasets ...")
    return BlendedMegatronDatasetBuilder(
        MockGPTDataset,
        train_val_test_num_samples,
        lambda: mpu.get_tensor_model_parallel_rank() == 0 and is_first_or_last_pipeline_stage(None),
        config,
    ).build()


train_valid_test_datasets_provider.is_distributed = True


def main(pretrain=pretrain, extra_argv=()):
    import sys

    sys.argv[1:1] = [*TINY_GPT, *extra_argv]
    args = parse_and_validate_args()
    full_config = pretrain_cfg_container_from_args(args, gpt_config_from_args(args))
    return pretrain(full_config, train_valid_test_datasets_provider, ModelType.encoder_or_decoder, forward_step)


if __name__ == "__main__":
    main()
