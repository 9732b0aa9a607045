"""The invalid-config corpus: each case is refused at VALIDATED with exactly these problems.

A case is (id, overrides applied to the tiny-gpt preset, expected sorted (check, field) pairs,
and optionally changes to the reference environment). The reference environment is a CPU-only
machine with none of the optional packages and a launcher rendezvous (MASTER_ADDR/PORT) set.
"""

from __future__ import annotations

from typing import Any

from lifecycle.config import Environment

CPU_ENV = Environment(cuda=False, modules=frozenset(), env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})

W2 = "parallel.world_size=2"
W4 = "parallel.world_size=4"

Case = tuple[str, list[str], list[tuple[str, str]], dict[str, Any]]

CASES: list[Case] = [
    (
        "heads_not_divisible_by_tp",
        ["model.num_attention_heads=3", "model.hidden_size=96", "parallel.tp=2", W2],
        [("attention", "model.num_attention_heads")],
        {},
    ),
    (
        "world_not_divisible_by_tp_pp_cp",
        ["parallel.tp=2", "parallel.world_size=3"],
        [("world_divisible", "parallel.world_size")],
        {},
    ),
    (
        "layers_not_divisible_by_pp",
        ["model.num_layers=3", "parallel.pp=2", W2],
        [("pipeline", "model.num_layers")],
        {},
    ),
    (
        "layers_not_divisible_by_pp_times_vpp",
        ["model.num_layers=4", "parallel.pp=2", "parallel.vpp=4", W2],
        [("pipeline", "model.num_layers")],
        {},
    ),
    ("vpp_without_pipeline", ["parallel.vpp=2"], [("pipeline", "parallel.vpp")], {}),
    (
        "interleaved_with_too_few_microbatches",
        [
            "model.num_layers=4",
            "parallel.pp=2",
            "parallel.vpp=2",
            "training.num_microbatches=1",
            W2,
        ],
        [("pipeline", "training.num_microbatches")],
        {},
    ),
    ("expert_parallel_without_moe", ["parallel.ep=2", W2], [("experts", "parallel.ep")], {}),
    (
        "experts_not_divisible_by_ep",
        ["model.num_moe_experts=3", "parallel.ep=2", W2],
        [("experts", "model.num_moe_experts")],
        {},
    ),
    (
        "world_not_divisible_by_expert_dims",
        ["model.num_moe_experts=4", "parallel.ep=2", "parallel.etp=2", "model.add_bias_linear=false", W2],
        [("world_divisible", "parallel.world_size")],
        {},
    ),
    (
        "moe_training_with_tp_needs_sequence_parallel",
        ["model.num_moe_experts=4", "parallel.tp=2", "model.add_bias_linear=false", W2],
        [("experts", "parallel.sequence_parallel")],
        {},
    ),
    (
        "moe_bias_needs_expert_tensor_parallel_size_1",
        ["model.num_moe_experts=4", "parallel.tp=2", "parallel.sequence_parallel=true", W2],
        [("experts", "model.add_bias_linear")],
        {},
    ),
    (
        "sequence_parallel_without_tp",
        ["parallel.sequence_parallel=true"],
        [("tensor_parallel_features", "parallel.sequence_parallel")],
        {},
    ),
    (
        "tp_comm_overlap_without_sp_or_te",
        ["parallel.tp=2", W2, "parallel.tp_comm_overlap=true"],
        [
            ("tensor_parallel_features", "parallel.tp_comm_overlap"),
            ("tensor_parallel_features", "parallel.tp_comm_overlap"),
            ("transformer_engine", "parallel.tp_comm_overlap"),
            ("transformer_engine", "parallel.tp_comm_overlap"),
        ],
        {},
    ),
    (
        "context_parallel_with_local_attention",
        ["parallel.cp=2", W2],
        [("tensor_parallel_features", "parallel.cp")],
        {},
    ),
    (
        "static_loss_scale_without_fp16",
        ["optimizer.loss_scale=128"],
        [("dtype", "optimizer.loss_scale")],
        {},
    ),
    (
        "negative_loss_scale",
        ["model.dtype=fp16", "optimizer.loss_scale=-1"],
        [("dtype", "optimizer.loss_scale")],
        {},
    ),
    ("explicit_vocab_zero", ["model.vocab_size=0"], [("vocab", "model.vocab_size")], {}),
    (
        "vocab_multiple_zero",
        ["model.make_vocab_size_divisible_by=0"],
        [("vocab", "model.make_vocab_size_divisible_by")],
        {},
    ),
    (
        "null_tokenizer_vocab_zero",
        ["tokenizer.vocab_size=0"],
        [("vocab", "tokenizer.vocab_size")],
        {},
    ),
    (
        "explicit_vocab_below_tokenizer",
        ["model.vocab_size=500"],
        [("vocab", "model.vocab_size")],
        {},
    ),
    ("no_tokenizer_and_no_vocab", ["tokenizer.build=false"], [("vocab", "tokenizer.build")], {}),
    ("huggingface_without_path", ["tokenizer.type=huggingface"], [("vocab", "tokenizer.path")], {}),
    (
        "huggingface_path_missing",
        ["tokenizer.type=huggingface", "tokenizer.path=/no/such/tok"],
        [("paths", "tokenizer.path"), ("paths", "tokenizer.type")],
        {},
    ),
    (
        "sequence_longer_than_positions",
        ["model.seq_length=64", "model.max_position_embeddings=32"],
        [("sequence", "model.seq_length")],
        {},
    ),
    (
        "param_gather_overlap_without_distributed_optimizer",
        ["ddp.overlap_param_gather=true"],
        [("ddp", "ddp.overlap_param_gather"), ("ddp", "ddp.overlap_param_gather")],
        {},
    ),
    (
        "checkpoint_load_missing",
        ["checkpoint.load=/no/such/ckpt"],
        [("paths", "checkpoint.load")],
        {"checkpoint_problem": "does not exist"},  # what the probe reads for /no/such/ckpt
    ),
    ("nccl_without_cuda", ["backend=nccl"], [("cuda_backend", "backend")], {}),
    (
        "transformer_engine_without_te_or_cuda",
        ["model.transformer_impl=transformer_engine"],
        [
            ("transformer_engine", "model.transformer_impl"),
            ("transformer_engine", "model.transformer_impl"),
        ],
        {},
    ),
    (
        "kv_offload_without_memory_saver",
        ["inference.kv_cache_management_mode=offload"],
        [("memory_saver", "inference.kv_cache_management_mode")],
        {},
    ),
    (
        "static_kv_pointers_without_memory_saver",
        ["inference.static_kv_memory_pointers=true"],
        [("memory_saver", "inference.static_kv_memory_pointers")],
        {},
    ),
    (
        "fake_backend_without_rank",
        ["backend=fake"],
        [("rank", "parallel.rank"), ("rank", "parallel.world_size")],
        {},
    ),
    ("rank_out_of_range", [W2, "parallel.rank=2"], [("rank", "parallel.rank")], {}),
    (
        "query_groups_not_dividing_heads",
        ["model.num_query_groups=3"],
        [("attention", "model.num_query_groups")],
        {},
    ),
    (
        "query_groups_neither_multiple_nor_divisor_of_tp",
        [
            "model.num_attention_heads=12",
            "model.hidden_size=96",
            "model.num_query_groups=6",
            "parallel.tp=4",
            W4,
        ],
        [("attention", "model.num_query_groups")],
        {},
    ),
    (
        "hidden_not_divisible_by_heads",
        ["model.hidden_size=66"],
        [("attention", "model.hidden_size")],
        {},
    ),
    ("zero_tensor_parallel", ["parallel.tp=0"], [("positive_sizes", "parallel.tp")], {}),
    (
        "negative_steps_and_empty_batch",
        ["training.steps=-1", "training.micro_batch_size=0"],
        [("positive_sizes", "training.micro_batch_size"), ("positive_sizes", "training.steps")],
        {},
    ),
    (
        "optimizer_out_of_range",
        ["optimizer.lr=-1", "optimizer.adam_beta1=1.0"],
        [("optimizer", "optimizer.adam_beta1"), ("optimizer", "optimizer.lr")],
        {},
    ),
    (
        "dropout_above_one",
        ["model.hidden_dropout=1.5"],
        [("optimizer", "model.hidden_dropout")],
        {},
    ),
    (
        "forced_real_cuda_paths_without_cuda",
        ["rehearsal=false"],
        [("cuda_backend", "rehearsal")],
        {},
    ),
    (
        "forced_rehearsal_on_nccl",
        ["rehearsal=true", "backend=nccl"],
        [("backend", "backend"), ("cuda_backend", "backend")],
        {},
    ),
    (
        "tensorboard_without_package",
        ["logging.tensorboard_dir=/tmp/tb"],
        [("writers", "logging.tensorboard_dir")],
        {},
    ),
    (
        "launcher_world_size_disagrees",
        [W4],
        [("launcher", "parallel.world_size")],
        {"env": {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}},
    ),
    (
        "launcher_world_size_not_divisible",
        ["parallel.tp=2"],
        [("launcher", "WORLD_SIZE")],
        {"env": {"WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}},
    ),
    ("many_ranks_without_rendezvous", [W2], [("launcher", "parallel.world_size")], {"env": {}}),
    (
        "unwritable_log_dir",
        ["logging.log_dir=/proc/startup-log"],
        [("writers", "logging.log_dir")],
        {"log_dir_problem": "log_dir '/proc/startup-log' cannot be created under '/proc'"},
    ),
    (
        "explicit_vocab_not_divisible_by_tp",
        ["model.vocab_size=1025", "parallel.tp=2", W2],
        [("splits", "model.vocab_size")],
        {},
    ),
    (
        "restored_vocab_not_divisible_by_tp",
        ["checkpoint.vocab_size=1001", "parallel.tp=2", W2],
        [("splits", "checkpoint.vocab_size")],
        {},
    ),
    (
        "sequence_not_divisible_by_tp_with_sequence_parallel",
        ["model.seq_length=33", "parallel.tp=2", "parallel.sequence_parallel=true", W2],
        [("splits", "model.seq_length")],
        {},
    ),
    (
        "everything_wrong_at_once",
        [
            "model.num_attention_heads=3",
            "model.num_layers=3",
            "parallel.tp=2",
            "parallel.pp=2",
            "parallel.world_size=6",
            "ddp.overlap_param_gather=true",
            "tokenizer.vocab_size=0",
            "backend=nccl",
        ],
        [
            ("attention", "model.hidden_size"),
            ("attention", "model.num_attention_heads"),
            ("cuda_backend", "backend"),
            ("ddp", "ddp.overlap_param_gather"),
            ("ddp", "ddp.overlap_param_gather"),
            ("pipeline", "model.num_layers"),
            ("vocab", "tokenizer.vocab_size"),
            ("world_divisible", "parallel.world_size"),
        ],
        {},
    ),
]
