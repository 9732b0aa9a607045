"""The drop-in's `pretrain` on a world of one rank in the test process (gloo, no rank launched): the
example script's tiny GPT goes through each state with Megatron-LM's own function for it, trains two
steps on CPU with the same losses as Megatron-LM's own `pretrain`, logs each state and step, and
returns with what Megatron-LM's leaves up; `--logging-level` and `--log-progress` do what they do
under Megatron-LM, and the flags whose work the drop-in does not run are refused, never ignored; a
failure in DISTRIBUTED names megatron's error and undoes what DISTRIBUTED made. The two-rank runs
(TP 2, a peer's failure, resume) are tests/integration/test_megatron_lm*.py's, launched ranks."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

import torch
import torch.distributed as dist
from megatron.core import mpu, num_microbatches_calculator, rerun_state_machine
from megatron.core.enums import ModelType
from megatron.training import global_vars, training
from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args
from megatron.training.arguments import parse_and_validate_args

from lifecycle.errors import ConfigError, PhaseFailed, ProviderError
from lifecycle.lm_dropin import pretrain
from lifecycle.testing import cuda_as_cpu
from tests.integration.megatron_lm_cases import ROOT, after_return, lifecycle_resources

sys.path.insert(0, str(ROOT / "examples"))
import pretrain_gpt_tiny as script  # the example script, importable once its folder is on the path

STEPS = ["--train-iters", "2", "--split", "98,1,1", "--eval-iters", "1"]
"""Two steps, then one of validation and one of test (at the end only: the eval interval is 1000)."""


@contextmanager
def one_rank() -> Iterator[None]:
    """A world of one on a free port, the script's argv put back, and Megatron-LM's globals unset after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv, step, forward_step = list(sys.argv), training.train_step, script.forward_step
    with pytest.MonkeyPatch.context() as env:
        for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
            env.setenv(name, value)
        env.setenv("MASTER_PORT", str(port))
        sys.argv[:] = ["pretrain_gpt_tiny.py"]  # the script's main puts its arguments after the first
        try:
            yield
        finally:
            sys.argv[:] = argv
            training.train_step, script.forward_step = step, forward_step
            if dist.is_initialized():
                mpu.destroy_model_parallel()
                dist.destroy_process_group()
            global_vars.unset_global_variables()
            rerun_state_machine.destroy_rerun_state_machine()
            num_microbatches_calculator.destroy_num_microbatches_calculator()


def _records(log_dir: Path) -> list[dict[str, Any]]:
    lines = (log_dir / "rank-00000.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] != "warning"]


def _megatrons_losses(argv: list[str] = STEPS) -> list[float]:
    """Megatron-LM's own `pretrain` of the same script, inside the CPU stand-ins: its per-step losses."""
    from megatron.training import pretrain as megatrons

    losses: list[float] = []
    original = training.train_step

    def train_step(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        losses.append(float(out[0]["lm loss"]))
        return out

    training.train_step = train_step
    with cuda_as_cpu():
        script.main(pretrain=megatrons, extra_argv=argv)
    return losses


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The script run with the drop-in, then with Megatron-LM's own `pretrain`, each from a fresh world,
    with `--logging-level` and `--log-progress` (whose work lives in `pretrain`, not in `train()`)."""
    log_dir = tmp_path_factory.mktemp("dropin")
    out: dict[str, Any] = {}
    for run in ("dropin", "megatron"):
        tensorboard = ["--tensorboard-dir", str(tmp_path_factory.mktemp(f"tensorboard-{run}"))]
        save = tmp_path_factory.mktemp(f"saved-{run}")
        argv = [*STEPS, *tensorboard, *LOGGING, "--save", str(save), "--save-interval", "1000"]
        with one_rank(), _root_level_restored():
            if run == "megatron":
                with contextlib.redirect_stdout(io.StringIO()) as printed:
                    out["megatron_losses"] = _megatrons_losses(argv)
                out["megatron_printed"] = printed.getvalue()
                out["megatron_tensorboard"] = _scalars(tensorboard[1])
                out["megatron_flags"] = _flags_left(save)
                continue
            _threads_while_training(out)
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                out["result"] = script.main(pretrain=lambda *a: pretrain(*a, log_dir=log_dir), extra_argv=argv)
            out["printed"] = printed.getvalue()
            out["tensorboard"] = _scalars(tensorboard[1])
            out["flags"] = _flags_left(save)
            out["step_after"] = training.train_step
            out["rerun"] = rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE is not None
            out["restored"] = _rng_states_restored()
            out["after"] = after_return()
            out["own"] = lifecycle_resources()
    out["records"] = _records(log_dir)
    return out


LOGGING = ["--logging-level", "10", "--log-progress"]


@contextmanager
def _root_level_restored() -> Iterator[None]:
    level = logging.getLogger().level
    try:
        yield
    finally:
        logging.getLogger().setLevel(level)


def _flags_left(save: Path) -> dict[str, Any]:
    """What `LOGGING` left: the root logger's level, and the progress file's messages (the last
    column, its times and throughputs as N: they differ from run to run)."""
    lines = (save / "progress.txt").read_text().splitlines()
    messages = [re.sub(r"[0-9.]+", "N", line.split("\t")[-1]) for line in lines]
    return {"level": logging.getLogger().level, "progress": messages}


def _scalars(tensorboard_dir: str) -> dict[str, list[int]]:
    """The steps of each scalar Megatron-LM's tensorboard writer wrote, once the script's writer is flushed."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    global_vars.get_tensorboard_writer().flush()
    events = EventAccumulator(tensorboard_dir)
    events.Reload()
    return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _threads_while_training(out: dict[str, Any]) -> None:
    """The script's forward step, which at its first call notes the lifecycle's threads in `out`."""
    original = script.forward_step

    def forward_step(data_iterator: Any, model: Any) -> Any:
        out.setdefault("threads", sorted(t.name for t in threading.enumerate() if t.name.startswith("lifecycle")))
        return original(data_iterator, model)

    script.forward_step = forward_step  # main() passes the module's forward_step to pretrain


def _rng_states_restored() -> tuple[list[str], list[str]]:
    """The RNG tracker's states that Megatron-LM's rerun state machine saved, cleared, then restored:
    (the names restored, the names saved)."""
    from megatron.core import tensor_parallel

    machine = rerun_state_machine.get_rerun_state_machine()
    saved = machine.state_save_func()
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.set_states({})
    machine.state_restore_func(saved)
    return sorted(tracker.get_states()), sorted(saved["rng_tracker_states"])


def _events(records: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == event]


def test_a_tiny_gpt_pretrained_through_the_drop_in_returns_its_last_iteration_and_a_loss_per_step(
    trained: dict[str, Any],
) -> None:
    result = trained["result"]
    assert result["iteration"] == 2
    assert len(result["losses"]) == 2 and all(isinstance(loss, float) for loss in result["losses"])
    assert result["second_binding_dropped"] == ["grad_scale_func"]  # train() binds what the lifecycle bound


def test_the_drop_in_trains_with_the_same_losses_as_megatron_lms_own_pretrain(trained: dict[str, Any]) -> None:
    assert trained["result"]["losses"] == pytest.approx(trained["megatron_losses"], rel=1e-6)


def test_the_startup_log_enters_each_state_in_order_and_records_each_step_with_its_loss(
    trained: dict[str, Any],
) -> None:
    records = trained["records"]
    entered = [r["dest"] for r in _events(records, "transition_completed")]
    assert entered == ["VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND", "SHUT_DOWN"]
    steps = _events(records, "step_completed")
    assert [(r["step"], r["loss"]) for r in steps] == list(enumerate(trained["result"]["losses"], start=1))
    assert [r["finalizer_calls"] for r in _events(records, "first_step_finalized")] == [1]


def test_distributed_is_megatrons_one_rank_gloo_world_seeded_in_a_cpu_rehearsal(trained: dict[str, Any]) -> None:
    records = trained["records"]
    assert [r["reason"] for r in _events(records, "rehearsal_enabled")] == ["cuda absent"]
    (initialized,) = _events(records, "distributed_initialized")
    assert (initialized["backend"], initialized["ranks"]) == ("gloo", {"tp": 0, "pp": 0, "cp": 0, "ep": 0, "dp": 0})
    kinds = {r["kind"] for r in _events(records, "side_effect") if r["trigger"] == "init_distributed"}
    assert kinds == {"cuda_device", "process_group", "parallel_state", "rng"}


def test_services_adopt_the_arguments_the_script_parsed(trained: dict[str, Any]) -> None:
    (ready,) = _events(trained["records"], "services_ready")
    assert (ready["vocab_source"], ready["vocab_size"]) == ("parse_and_validate_args", 1024)
    (built,) = _events(trained["records"], "model_built")
    assert (built["chunks"], built["optimizer"]) == (1, True)


def test_pretrain_returns_with_megatron_lms_world_and_args_up_and_none_of_the_lifecycles_own(
    trained: dict[str, Any],
) -> None:
    after = trained["after"]
    assert (after["initialized"], after["world"], after["dp"], after["train_iters"]) == (True, 1, 1, 2)
    assert trained["rerun"], "Megatron-LM's pretrain leaves its rerun state machine up"
    assert trained["step_after"] is training.train_step  # train_step put back
    assert trained["own"] == {"threads": [], "rehearsal": False, "cuda_available": False, "wrapped": []}


def test_after_training_pretrain_evaluates_on_the_validation_and_the_test_set_as_megatron_lms_does(
    trained: dict[str, Any],
) -> None:
    evaluated = [line for line in trained["printed"].splitlines() if "validation loss at iteration 2" in line]
    assert [line.split("|")[0].strip() for line in evaluated] == [
        "validation loss at iteration 2 on validation set",
        "validation loss at iteration 2 on test set",
    ]


def test_the_drop_in_writes_the_tensorboard_scalars_and_evaluation_lines_megatron_lms_pretrain_writes(
    trained: dict[str, Any],
) -> None:
    tensorboard = trained["tensorboard"]
    assert tensorboard == trained["megatron_tensorboard"], tensorboard
    # the evaluations after training, at its last iteration: the validation set's and the test set's (the same tag)
    assert (tensorboard["lm loss"], tensorboard["lm loss validation"]) == ([1, 2], [2, 2])

    def evaluating(printed: str) -> list[str]:
        return [line for line in printed.splitlines() if line.startswith("Evaluating")]

    assert evaluating(trained["printed"]) == evaluating(trained["megatron_printed"])
    assert evaluating(trained["printed"]) == ["Evaluating on 4 samples", "Evaluating iter 1/1"] * 2  # valid, test


def test_a_lone_rank_starts_and_trains_under_the_lifecycles_rank_watch(trained: dict[str, Any]) -> None:
    assert "lifecycle-rank-watch" in trained["threads"]  # its states' deadline, with no launcher to keep one


def test_the_rerun_state_machine_saves_and_restores_megatrons_rng_tracker_states(trained: dict[str, Any]) -> None:
    restored, saved = trained["restored"]
    assert restored == saved and "model-parallel-rng" in saved


def _container_of_derived_arguments() -> Any:
    """The script's container, with no parsed arguments left (`pretrain` derives them from it)."""
    sys.argv[1:] = [*script.TINY_GPT, *STEPS]  # as the script's main parses them
    args = parse_and_validate_args()
    container = pretrain_cfg_container_from_args(args, gpt_config_from_args(args))
    global_vars.unset_global_variables()
    return container


def _pretrain_container(container: Any, log_dir: Path, **given: Any) -> Any:
    """The drop-in's `pretrain` of `container` with the script's datasets and forward step."""
    return pretrain(
        container,
        script.train_valid_test_datasets_provider,
        ModelType.encoder_or_decoder,
        script.forward_step,
        log_dir=log_dir,
        **given,
    )


def test_a_container_megatron_lms_validate_args_refuses_is_refused_at_validated_with_its_reason(
    tmp_path: Path,
) -> None:
    with one_rank():
        container = _container_of_derived_arguments()
        container.train.train_samples = 100  # beside train_iters: Megatron-LM asserts one or the other
        with pytest.raises(ConfigError) as refused:
            _pretrain_container(container, tmp_path)
        assert not dist.is_initialized() and global_vars._GLOBAL_ARGS is None
    assert "Megatron-LM's validate_args: expected iteration-based training" in str(refused.value)
    assert [r["dest"] for r in _events(_records(tmp_path), "transition_completed")] == ["FAILED", "SHUT_DOWN"]


def test_a_model_provider_of_no_shape_megatron_lm_calls_is_refused_at_validated_before_any_work(
    tmp_path: Path,
) -> None:
    with one_rank():
        with pytest.raises(ConfigError) as refused:
            script.main(pretrain=lambda *a: pretrain(*a, model_provider=42, log_dir=tmp_path), extra_argv=STEPS)
        assert not dist.is_initialized()
    assert "model_provider='int': model_provider: a int (defined at builtins) is not a model pr" in str(refused.value)
    assert [r["dest"] for r in _events(_records(tmp_path), "transition_completed")] == ["FAILED", "SHUT_DOWN"]


@pytest.fixture(scope="module")
def failed_in_distributed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The script's container with seed 0 and no parsed arguments: `pretrain` derives them, and
    Megatron-LM's `_set_random_seed` refuses the seed after the process group is up."""
    log_dir = tmp_path_factory.mktemp("failed")
    out: dict[str, Any] = {}
    with one_rank():
        container = _container_of_derived_arguments()
        container.rng.seed = 0
        with pytest.raises(PhaseFailed) as failed:
            _pretrain_container(container, log_dir)
        out["error"] = str(failed.value)
        out["after"] = {
            "process_group": dist.is_initialized(),
            "parallel_state": mpu.model_parallel_is_initialized(),
            "rerun_state_machine": rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE is not None,
            "args": global_vars._GLOBAL_ARGS is not None,
        }
        out["own"] = lifecycle_resources()
    out["records"] = _records(log_dir)
    return out


def test_arguments_derived_from_the_container_get_megatron_lms_globals_set_by_the_drop_in(
    failed_in_distributed: dict[str, Any],
) -> None:
    (ready,) = _events(failed_in_distributed["records"], "services_ready")
    assert (ready["vocab_source"], ready["vocab_size"]) == ("set_global_variables", 1024)


def test_a_failure_in_distributed_names_megatrons_error_and_the_state_it_failed_in(
    failed_in_distributed: dict[str, Any],
) -> None:
    assert "init_distributed failed in SERVICES_READY: ValueError: Seed (0)" in failed_in_distributed["error"]
    (failure,) = _events(failed_in_distributed["records"], "transition_failed")
    assert (failure["trigger"], failure["error"]) == ("init_distributed", "Seed (0) should be a positive integer.")


def test_a_failure_in_distributed_undoes_the_world_the_rerun_state_machine_and_the_cpu_stand_ins(
    failed_in_distributed: dict[str, Any],
) -> None:
    after = failed_in_distributed["after"]
    assert after == {"process_group": False, "parallel_state": False, "rerun_state_machine": False, "args": False}
    assert failed_in_distributed["own"] == {"threads": [], "rehearsal": False, "cuda_available": False, "wrapped": []}
    assert not torch.cuda.is_available()


def test_a_tokenizer_that_cannot_be_built_fails_services_ready_and_leaves_no_megatron_globals(
    tmp_path: Path,
) -> None:
    with one_rank():
        container = _container_of_derived_arguments()
        container.tokenizer.tokenizer_type = "SentencePieceTokenizer"
        container.tokenizer.tokenizer_model = str(tmp_path / "missing.model")  # a path that was mistyped
        with pytest.raises(PhaseFailed) as failed:
            _pretrain_container(container, tmp_path / "logs")
        left = (dist.is_initialized(), global_vars._GLOBAL_ARGS is not None, global_vars._GLOBAL_TOKENIZER is not None)
    assert "start_services failed in VALIDATED: ValueError: tokenizer_path: " in str(failed.value)
    assert left == (False, False, False)  # what set_global_variables set before it failed is released
    (failure,) = _events(_records(tmp_path / "logs"), "transition_failed")
    assert failure["trigger"] == "start_services"


def _parsed_container(*, model: bool) -> Any:
    """The script's arguments parsed as its main parses them (one step), and their container: with the
    model config the script makes of them, or none (Megatron-LM then builds with the model provider)."""
    sys.argv[1:] = [*script.TINY_GPT, "--train-iters", "1"]
    args = parse_and_validate_args()
    return pretrain_cfg_container_from_args(args, gpt_config_from_args(args) if model else None)


def test_a_keyword_model_provider_builds_the_model_megatron_lm_trains_when_the_container_has_no_model(
    tmp_path: Path,
) -> None:
    from megatron.training.models.gpt import GPTModelBuilder

    asked: list[dict[str, Any]] = []

    def provider(
        pre_process: bool = True, post_process: bool = True, config: Any = None, pg_collection: Any = None
    ) -> Any:
        asked.append({"pre_process": pre_process, "post_process": post_process, "config": type(config).__name__})
        return GPTModelBuilder(gpt_config_from_args(global_vars.get_args())).build_model(
            pg_collection, pre_process=pre_process, post_process=post_process
        )

    with one_rank():
        result = _pretrain_container(_parsed_container(model=False), tmp_path, model_provider=provider)
    # called as Megatron-LM's get_model calls it: one chunk, both ends, no config (the provider makes its own)
    assert asked == [{"pre_process": True, "post_process": True, "config": "NoneType"}]
    assert result["iteration"] == 1 and len(result["losses"]) == 1
    assert [r["step"] for r in _events(_records(tmp_path), "step_completed")] == [1]


def test_a_model_provider_that_raises_fails_model_built_and_undoes_distributed(tmp_path: Path) -> None:
    def provider(pre_process: bool = True, post_process: bool = True) -> Any:
        raise RuntimeError("no weights here")

    with one_rank():
        with pytest.raises(ProviderError) as failed:
            _pretrain_container(_parsed_container(model=False), tmp_path, model_provider=provider)
        left = {
            "process_group": dist.is_initialized(),
            "rerun_state_machine": rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE is not None,
            "script's args": global_vars._GLOBAL_ARGS is not None,
        }
        own = lifecycle_resources()
    line = provider.__code__.co_firstlineno
    assert f"provider (defined at {__file__}:{line}) raised RuntimeError: no weights here" in str(failed.value)
    assert left == {"process_group": False, "rerun_state_machine": False, "script's args": True}
    assert own == {"threads": [], "rehearsal": False, "cuda_available": False, "wrapped": []}
    (failure,) = _events(_records(tmp_path), "transition_failed")
    assert failure["trigger"] == "build_model"


def test_with_the_distributed_optimizers_overlapped_param_gather_train_defers_the_first_gather_itself(
    tmp_path: Path,
) -> None:
    argv = ["--train-iters", "2", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    with one_rank():
        result = script.main(pretrain=lambda *a: pretrain(*a, log_dir=tmp_path), extra_argv=argv)
    with one_rank():
        megatrons = _megatrons_losses(argv)
    assert result["losses"] == pytest.approx(megatrons, rel=1e-6)
    records = _records(tmp_path)
    assert _events(records, "param_gather_deferred") == []  # the drop-in's steps leave it to train()
    assert [r["step"] for r in _events(records, "step_completed")] == [1, 2]
    # train() binds the callbacks the lifecycle bound; the second binding of each is dropped
    assert result["second_binding_dropped"] == ["grad_scale_func", "no_sync_func", "grad_sync_func"]


def test_a_model_config_changed_in_the_container_after_parsing_is_what_megatron_builds_and_the_check_compares(
    tmp_path: Path,
) -> None:
    with one_rank():
        container = _parsed_container(model=True)
        container.model.transformer.hidden_dropout = 0.0  # the parsed arguments keep 0.1
        result = _pretrain_container(container, tmp_path)
    assert result["iteration"] == 1
    (checked,) = _events(_records(tmp_path), "settings_checked")
    assert checked["mismatches"] == [] and checked["compared"] > 100  # the model's 0.0 is what was asked


def test_logging_level_sets_the_root_loggers_level_as_megatron_lm_does(trained: dict[str, Any]) -> None:
    assert trained["flags"]["level"] == trained["megatron_flags"]["level"] == logging.DEBUG


def test_log_progress_writes_megatron_lms_progress_lines_in_its_order(trained: dict[str, Any]) -> None:
    assert trained["flags"]["progress"][0] == "Starting job"
    assert trained["flags"]["progress"] == trained["megatron_flags"]["progress"]


def test_flags_whose_work_the_drop_in_does_not_do_are_refused_at_validated_naming_each(tmp_path: Path) -> None:
    argv = [*STEPS, "--enable-ft-package", "--use-persistent-ckpt-worker"]
    with one_rank():
        with pytest.raises(ConfigError) as refused:
            script.main(pretrain=lambda *a: pretrain(*a, log_dir=tmp_path), extra_argv=argv)
        assert not dist.is_initialized()

    text = str(refused.value)
    assert "--enable-ft-package asks for nvidia-resiliency-ext's fault tolerance hooks" in text
    assert "--use-persistent-ckpt-worker asks for Megatron-LM's persistent checkpoint worker" in text
    assert "drop --enable-ft-package, or call megatron.training.pretrain" in text
    failed = [r["dest"] for r in _records(tmp_path) if r["event"] == "transition_completed"]
    assert failed == ["FAILED", "SHUT_DOWN"]
