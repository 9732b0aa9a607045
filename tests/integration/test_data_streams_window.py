"""The resume window and the data's own random streams, in one process with real torch DataLoaders,
samplers and NumPy generators (`lifecycle.resume.streams.ResumeWindow.watch_data`): what is found,
a draw named with its caller whether it came before or after the data was given, and nothing of the
window left on the data after it."""

from __future__ import annotations

from typing import Any

import numpy
import pytest

from lifecycle.resume.streams import ResumeWindow


class Augmented:
    """A map-style dataset with a NumPy generator and a legacy RandomState of its own."""

    def __init__(self) -> None:
        self.rng = numpy.random.default_rng(5)
        self.legacy = numpy.random.RandomState(6)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> float:
        return index + float(self.rng.random())


def _loader(dataset: Any = None, **kwargs: Any) -> Any:
    import torch

    generator = torch.Generator().manual_seed(11)
    return torch.utils.data.DataLoader(dataset or list(range(8)), batch_size=2, generator=generator, **kwargs)


def _moved(window: ResumeWindow) -> dict[str, dict[str, str]]:
    checked = window.check(3)
    assert checked is not None
    return {m["stream"]: m for m in checked.moved}


def test_the_generators_of_a_loader_its_sampler_and_its_dataset_are_found_and_a_clean_window_moves_none() -> None:
    window = ResumeWindow.open(2)
    loader = _loader(Augmented(), shuffle=True)
    found = window.watch_data(loader)
    assert found == [
        "data:loader.generator",
        "data:dataset.legacy",
        "data:dataset.rng",
    ]  # the sampler's is the loader's
    assert _moved(window) == {}
    assert len(list(loader)) == 4  # iterated after the check: the first step's draws are its own


def test_an_iterator_made_before_it_was_given_is_named_by_the_draw_of_its_base_seed() -> None:
    window = ResumeWindow.open(2)
    iterator = iter(_loader(shuffle=True))  # draws its base seed from the loader's generator
    assert window.watch_data(iterator) == ["data:sampler.generator"]  # from the iterator: the sampler's generator
    moved = _moved(window)["data:sampler.generator"]
    assert moved["caller"].startswith("tests/integration/test_data_streams_window.py:")
    assert moved["caller"].endswith(
        "in test_an_iterator_made_before_it_was_given_is_named_by_the_draw_of_its_base_seed (torch.Tensor.random_)"
    )


@pytest.mark.parametrize(
    ("attr", "entry"),
    [("rng", "numpy.random._generator.Generator.random"), ("legacy", "numpy.random.mtrand.RandomState.normal")],
)
def test_a_numpy_generator_on_a_dataset_drawn_in_the_window_is_named_with_its_caller(attr: str, entry: str) -> None:
    dataset = Augmented()
    window = ResumeWindow.open(2)
    window.watch_data(_loader(dataset))
    dataset.rng.random() if attr == "rng" else dataset.legacy.normal()
    moved = _moved(window)
    assert list(moved) == [f"data:dataset.{attr}"]
    assert moved[f"data:dataset.{attr}"]["caller"].endswith(
        f"in test_a_numpy_generator_on_a_dataset_drawn_in_the_window_is_named_with_its_caller ({entry})"
    )


@pytest.mark.parametrize("end", ["check", "close"])
def test_no_wrapper_is_left_on_the_data_after_the_window(end: str) -> None:
    dataset = Augmented()
    rng, legacy = dataset.rng, dataset.legacy
    expected = numpy.random.default_rng(5).random(3)
    window = ResumeWindow.open(2)
    window.watch_data(_loader(dataset))
    assert dataset.rng is not rng and isinstance(dataset.rng, numpy.random.Generator)  # watched, same type
    window.check(3) if end == "check" else window.close()  # close: no first step came (a shutdown)
    assert dataset.rng is rng and dataset.legacy is legacy
    assert type(dataset.rng) is numpy.random.Generator and type(dataset.legacy) is numpy.random.RandomState
    assert (dataset.rng.random(3) == expected).all()  # the state was shared, never copied: nothing skipped
    assert window.drawn == {} or end == "close"


def test_a_generator_replaced_on_the_dataset_during_the_window_stays_the_callers() -> None:
    dataset = Augmented()
    window = ResumeWindow.open(2)
    window.watch_data(_loader(dataset))
    mine = numpy.random.default_rng(9)
    dataset.rng = mine
    window.check(3)
    assert dataset.rng is mine


def test_a_generator_named_by_the_caller_is_a_stream_of_its_name() -> None:
    import torch

    generator = torch.Generator().manual_seed(1)
    window = ResumeWindow.open(2)
    assert window.watch_data(augment=generator) == ["data:augment"]
    torch.rand(2, generator=generator)
    assert "data:augment" in _moved(window)


def test_a_megatron_sampler_whose_consumed_samples_changed_is_a_moved_position() -> None:
    samplers = pytest.importorskip("megatron.training.datasets.data_samplers")
    import torch

    sampler = samplers.MegatronPretrainingSampler(64, 8, 2, 0, 1)
    iterator = iter(torch.utils.data.DataLoader(list(range(64)), batch_sampler=sampler))
    window = ResumeWindow.open(2)
    assert window.watch_data(iterator) == ["data:batch_sampler"]
    sampler.consumed_samples = 16  # the resume offset applied again
    assert "data:batch_sampler" in _moved(window)


def test_a_distributed_sampler_whose_epoch_was_set_in_the_window_is_a_moved_position() -> None:
    import torch

    sampler = torch.utils.data.DistributedSampler(list(range(8)), num_replicas=1, rank=0, seed=3)
    window = ResumeWindow.open(2)
    assert window.watch_data(_loader(sampler=sampler)) == ["data:loader.generator", "data:sampler"]
    sampler.set_epoch(1)  # its order is drawn from seed + epoch
    assert list(_moved(window)) == ["data:sampler"]


class Hostile:
    """A dataset whose attributes raise something other than AttributeError when read."""

    def __init__(self) -> None:
        self.rng = numpy.random.default_rng(5)

    def __getattribute__(self, name: str) -> Any:
        if name in ("__dict__", "rng"):
            raise RuntimeError(f"{name} is not for you")
        return object.__getattribute__(self, name)


def test_data_whose_attributes_raise_is_left_unwatched_with_a_warning_and_the_loop_goes_on() -> None:
    window = ResumeWindow.open(2)
    loader = _loader(Hostile())
    assert window.watch_data(named=numpy.random.default_rng(1)) == ["data:named"]
    with pytest.warns(UserWarning, match="stopped looking for the data's generators: RuntimeError"):
        found = window.watch_data(loader)
    assert found == ["data:named"]  # this data is not watched; the window and the loop go on
    assert _moved(window) == {}
