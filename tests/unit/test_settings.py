"""`bindings.check_settings`' judgement, on plain dataclasses (it reads fields, never megatron):
what was asked against every object the runtime reads, and each object against its own
`__post_init__`; megatron's legitimate derivations both ways; the report's lines and its error.
The same checks on real megatron models, and the seven replayed bugs: tests/integration/test_settings_land.py."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from dataclasses import dataclass, field

import pytest

from bindings import DERIVATIONS, SettingsNotLanded, requested
from lifecycle.testing import (
    Derivation,
    Mismatch,
    Requested,
    SettingsReport,
    compare_settings,
    same_value,
    settings_targets,
)


@dataclass
class Transformer:
    """A config shaped like megatron's: validated and derived in `__post_init__`."""

    hidden_size: int = 64
    num_attention_heads: int = 4
    kv_channels: int | None = None
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    layers: list[int] = field(default_factory=lambda: [1, 2])
    init_method: object = None
    finalize_model_grads_func: object = None

    def __post_init__(self) -> None:
        if self.kv_channels is None:
            self.kv_channels = self.hidden_size // self.num_attention_heads
        if self.recompute_granularity == "full" and self.recompute_method is None:
            raise ValueError("recompute_method must be block or uniform")
        if self.init_method is None:
            self.init_method = functools.partial(_normal, std=0.02)


@dataclass
class Heads:
    """A config whose `__post_init__` always derives `head_dim` (not an init field)."""

    hidden_size: int = 64
    num_attention_heads: int = 4
    head_dim: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.head_dim = self.hidden_size // self.num_attention_heads


@dataclass
class DDP:
    overlap_grad_reduce: bool = False
    bucket_size: int | None = None


def _normal(tensor: object, std: float) -> object:
    return tensor


class Chunk:
    def __init__(self, config: object, ddp: object = None) -> None:
        self.config = config
        self.ddp_config = ddp


def _config_of(chunk: object) -> object:
    return chunk.config  # type: ignore[attr-defined]


def judge(asked: object, *chunks: Chunk, ddp: object = None, allow: tuple[str, ...] = (), provider: object = None):  # type: ignore[no-untyped-def]
    targets = settings_targets(list(chunks), _config_of, provider_config=provider)
    return compare_settings(requested(asked, ddp), targets, allow)


def test_a_model_that_carries_every_setting_asked_for_is_ok_and_counts_what_it_compared() -> None:
    asked = Transformer()
    report = judge(asked, Chunk(asked), Chunk(asked), provider=asked)
    assert report.ok and report.mismatches == ()
    assert report.objects == ("chunks 0, 1's config (the provider's config)",)
    assert report.compared == len(dataclasses.fields(Transformer)) - 1  # every field but the callback slot


def test_a_copy_that_lost_a_setting_names_the_field_both_values_and_the_object() -> None:
    asked = Transformer(recompute_granularity="full", recompute_method="uniform")
    copy = dataclasses.replace(asked, recompute_granularity=None, recompute_method=None)
    report = judge(asked, Chunk(copy), provider=asked)
    assert report.fields() == ("recompute_granularity", "recompute_method")
    first = report.mismatches[0]
    assert (first.requested, first.found, first.kind) == ("'full'", "None", "not-landed")
    assert first.where == "chunk 0's config (not the provider's config: a copy or a new one)"
    assert first.line() == (
        "recompute_granularity: requested 'full', found None on chunk 0's config (not the provider's config: "
        "a copy or a new one)"
    )


def test_a_copys_new_init_partial_is_the_same_setting_but_another_std_is_not() -> None:
    asked = Transformer()
    copied = Transformer(init_method=functools.partial(_normal, std=0.02))
    assert judge(asked, Chunk(copied)).ok
    other = Transformer(init_method=functools.partial(_normal, std=0.5))
    [mismatch] = judge(asked, Chunk(other)).mismatches
    assert mismatch.field == "init_method" and mismatch.found == "_normal(std=0.5)"


def test_a_list_edited_in_place_after_it_was_asked_for_is_caught() -> None:
    asked = Transformer()
    wanted = requested(asked)
    asked.layers.append(3)  # the same object, edited in place by a provider
    report = compare_settings(wanted, settings_targets([Chunk(asked)], _config_of))
    assert report.fields() == ("layers",)


def test_a_field_set_after_validation_shows_as_what_post_init_derives_now() -> None:
    late = Heads()
    late.num_attention_heads = 8  # after __post_init__: head_dim is stale
    report = compare_settings(requested(late), [("transformer", late, "chunk 0's config")])
    [mismatch] = report.mismatches
    assert (mismatch.field, mismatch.kind, mismatch.found, mismatch.requested) == (
        "head_dim",
        "changed-after-validation",
        "16",
        "8",
    )
    assert "a field was set after the config was validated" in mismatch.line()


def test_a_combination_post_init_refuses_is_invalid_with_megatrons_message() -> None:
    asked = Transformer(recompute_granularity="full", recompute_method="uniform")
    asked.recompute_method = None  # set after __post_init__ validated it
    report = compare_settings(requested(asked), [("transformer", asked, "chunk 0's config")])
    [mismatch] = report.mismatches
    assert mismatch.kind == "invalid" and mismatch.field == "__post_init__"
    assert mismatch.found == "ValueError: recompute_method must be block or uniform"


def test_re_running_post_init_leaves_the_checked_object_alone() -> None:
    asked = Transformer()
    before = {f.name: getattr(asked, f.name) for f in dataclasses.fields(asked)}
    layers = list(asked.layers)
    compare_settings(requested(asked), [("transformer", asked, "chunk 0's config")])
    assert all(getattr(asked, name) is value for name, value in before.items())
    assert asked.layers == layers


def test_the_callback_slots_are_left_to_bindings_check() -> None:
    asked = Transformer()
    bound = dataclasses.replace(asked, finalize_model_grads_func=print)
    assert judge(asked, Chunk(bound)).ok


@pytest.mark.parametrize("name", ["hidden_size", "transformer.hidden_size"])
def test_allow_mismatch_accepts_a_field_knowingly_and_keeps_it_in_the_report(name: str) -> None:
    report = judge(Transformer(), Chunk(Transformer(hidden_size=64, kv_channels=16, num_attention_heads=4)))
    assert report.ok
    changed = Transformer(hidden_size=128, kv_channels=16)
    report = judge(Transformer(), Chunk(changed), allow=(name,))
    assert report.ok and [m.field for m in report.allowed] == ["hidden_size"]
    assert "allowed: hidden_size" in report.render()


def test_an_allowed_name_that_is_no_field_is_reported() -> None:
    report = judge(Transformer(), Chunk(Transformer()), allow=("hiden_size", "hidden_size"))
    assert report.unknown_allowed == ("hiden_size",)


def test_raise_if_bad_names_every_field_on_its_own_line_with_the_fix_and_pickles() -> None:
    report = judge(Transformer(), Chunk(Transformer(hidden_size=32, num_attention_heads=2)))
    with pytest.raises(SettingsNotLanded) as info:
        report.raise_if_bad()
    lines = str(info.value).splitlines()
    assert lines[0] == "2 settings did not reach the model that trains:"
    assert lines[1].startswith("  hidden_size: requested 64, found 32 on chunk 0's config")
    assert lines[2].startswith("  num_attention_heads: requested 4, found 2")
    assert "settings.allow_mismatch" in lines[-1]
    again = pickle.loads(pickle.dumps(info.value))
    assert again.fields == ["hidden_size", "num_attention_heads"] and isinstance(again, ValueError)


def test_ddp_bucket_size_is_megatrons_to_set_as_the_derivation_says_and_nothing_else() -> None:
    [rule] = [d for d in DERIVATIONS if (d.section, d.field) == ("ddp", "bucket_size")]
    assert "DistributedDataParallel" in rule.reason
    asked = Transformer()

    def ddp_report(want: DDP, found: DDP) -> tuple[str, ...]:
        return judge(asked, Chunk(asked, found), ddp=want).fields()

    assert ddp_report(DDP(overlap_grad_reduce=True), DDP(overlap_grad_reduce=True, bucket_size=40_000_000)) == ()
    assert ddp_report(DDP(bucket_size=10**6), DDP(bucket_size=None)) == ()  # no overlap: one bucket
    wrong = ddp_report(DDP(overlap_grad_reduce=True), DDP(overlap_grad_reduce=True, bucket_size=1000))
    assert wrong == ("ddp.bucket_size",)
    asked_size = DDP(overlap_grad_reduce=True, bucket_size=10**6)
    assert ddp_report(asked_size, DDP(overlap_grad_reduce=True, bucket_size=40_000_000)) == ("ddp.bucket_size",)


def test_each_ddp_wrapper_and_each_chained_optimizer_config_is_compared_once_by_identity() -> None:
    asked, shared = Transformer(), DDP()

    class Inner:
        def __init__(self, config: object) -> None:
            self.config = config

    class Chained:
        def __init__(self) -> None:
            self.chained_optimizers = [Inner(DDP()), Inner(DDP(bucket_size=3))]

    targets = settings_targets([Chunk(asked, shared), Chunk(asked, shared)], _config_of, optimizer=Chained())
    assert [where for _, _, where in targets] == [
        "chunks 0, 1's config",
        "chunks 0, 1's DDP config",
        "chained optimizer 0's config",
        "chained optimizer 1's config",
    ]
    own = DDP()
    single = settings_targets([Chunk(asked)], _config_of, optimizer=Inner(own))
    assert single[-1] == ("optimizer", own, "the optimizer's config")


def test_same_value_compares_by_equality_partials_by_parts_and_falls_back_to_identity() -> None:
    class NoBool:
        def __eq__(self, other: object) -> object:
            return [True]

        __hash__ = object.__hash__

    odd = NoBool()
    assert same_value(odd, odd) and not same_value(odd, NoBool())
    assert same_value(functools.partial(_normal, std=1.0), functools.partial(_normal, std=1.0))
    assert not same_value(functools.partial(_normal, std=1.0), functools.partial(print, std=1.0))
    assert not same_value(1, 1.0) and not same_value(True, 1)


def test_docs_list_every_derivation_with_its_reason() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "bindings.md").read_text()
    for rule in DERIVATIONS:
        assert f"`{rule.section}.{rule.field}`" in text and rule.reason in text


def test_optimizer_timers_attached_by_megatron_lm_pass_only_where_none_were_asked() -> None:
    @dataclass
    class Optimizer:
        lr: float = 0.1
        timers: object = None

    asked, handle = Optimizer(), object()
    wanted = requested(Transformer(), optimizer=asked)
    ok = compare_settings(wanted, [("optimizer", Optimizer(timers=handle), "the optimizer's config")])
    assert ok.ok
    mine = requested(Transformer(), optimizer=Optimizer(timers=handle))
    lost = compare_settings(mine, [("optimizer", Optimizer(timers=object()), "the optimizer's config")])
    assert lost.fields() == ("optimizer.timers",)


def test_the_report_renders_a_head_with_counts_and_one_indented_line_per_mismatch() -> None:
    asked = Transformer()
    ok = judge(asked, Chunk(asked))
    assert ok.render() == f"settings check: ok ({ok.compared} fields compared on 1 object)"
    two = judge(asked, Chunk(Transformer(hidden_size=32, kv_channels=16)), Chunk(Transformer()))
    head, *lines = two.render().splitlines()
    assert head == f"settings check: NOT LANDED ({two.compared} fields compared on 2 objects)"
    assert lines == ["  hidden_size: requested 64, found 32 on chunk 0's config"]
    allowed = judge(asked, Chunk(Transformer(hidden_size=32, kv_channels=16)), allow=("hidden_size",))
    assert allowed.render().splitlines()[0].endswith("; 1 allowed by settings.allow_mismatch)")
    one = judge(asked, Chunk(Transformer(hidden_size=32, kv_channels=16)))
    with pytest.raises(SettingsNotLanded, match="^1 setting did not reach the model that trains:\n"):
        one.raise_if_bad()


def test_log_fields_leave_out_what_is_unknown_and_keep_the_rest() -> None:
    [mismatch] = judge(Transformer(), Chunk(Transformer(hidden_size=32, kv_channels=16))).mismatches
    assert mismatch.log_fields() == {
        "section": "transformer",
        "field": "hidden_size",
        "kind": "not-landed",
        "requested": "64",
        "found": "32",
        "where": "chunk 0's config",
    }
    named = compare_settings(
        requested(Transformer(), asked_as={"hidden_size": "model.hidden_size"}),
        settings_targets([Chunk(Transformer(hidden_size=32, kv_channels=16))], _config_of),
    )
    assert named.mismatches[0].asked_as == "model.hidden_size"
    assert named.mismatches[0].line().startswith("hidden_size (model.hidden_size): requested 64")


def test_a_long_value_is_cut_to_80_characters_and_a_long_refusal_to_its_first_line_of_300() -> None:
    @dataclass
    class Named:
        name: str = "x" * 78

    [kept] = compare_settings(requested(Named()), [("transformer", Named(name="y" * 78), "c")]).mismatches
    assert kept.requested == repr("x" * 78)
    [cut] = compare_settings(requested(Named()), [("transformer", Named(name="y" * 200), "c")]).mismatches
    assert len(cut.found) == 80 and cut.found == repr("y" * 200)[:77] + "..."

    @dataclass
    class Refusing:
        size: int = 1

        def __post_init__(self) -> None:
            if self.size > 1:
                raise ValueError("z" * 400 + "\nsecond line")

    late = Refusing()
    late.size = 2
    [invalid] = compare_settings(requested(late), [("transformer", late, "chunk 0's config")]).mismatches
    assert invalid.found == ("ValueError: " + "z" * 400)[:300]


def test_only_dataclass_instances_have_fields_to_ask_for() -> None:
    assert requested(Transformer).transformer == {} and requested(object()).transformer == {}
    assert requested(Transformer(), DDP()).ddp == {"overlap_grad_reduce": False, "bucket_size": None}


def test_values_whose_equality_raises_or_partials_with_other_arguments_are_not_the_same() -> None:
    class Raising:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("ambiguous")

        __hash__ = object.__hash__

    odd = Raising()
    assert same_value(odd, odd) and not same_value(odd, Raising())
    assert not same_value(functools.partial(_normal, 1), functools.partial(_normal, 2))
    assert not same_value(functools.partial(_normal, 1), functools.partial(_normal, 1, 2))
    assert not same_value(functools.partial(_normal, std=1), functools.partial(_normal, mean=1))


@dataclass
class DDP3:
    overlap_grad_reduce: bool = True
    bucket_size: int | None = None
    grad_reduce_in_fp32: bool = False


def test_a_derived_field_does_not_hide_the_fields_after_it_nor_does_a_section_not_asked_for() -> None:
    asked = Transformer()
    found = DDP3(bucket_size=40_000_000, grad_reduce_in_fp32=True)
    report = judge(asked, Chunk(asked, found), ddp=DDP3())
    assert report.fields() == ("ddp.grad_reduce_in_fp32",)
    assert judge(asked, Chunk(asked, DDP3(bucket_size=39_999_999)), ddp=DDP3()).fields() == ("ddp.bucket_size",)
    wanted = requested(asked, optimizer=DDP3())  # no DDP section asked: the DDP target is skipped, not the rest
    targets = [("ddp", DDP3(), "chunk 0's DDP config"), ("optimizer", DDP3(grad_reduce_in_fp32=True), "opt")]
    assert compare_settings(wanted, targets).fields() == ("optimizer.grad_reduce_in_fp32",)


@pytest.mark.parametrize("name", ["ddp.grad_reduce_in_fp32", "grad_reduce_in_fp32"])
def test_allow_mismatch_names_a_section_field_either_way(name: str) -> None:
    asked = Transformer()
    report = judge(asked, Chunk(asked, DDP3(grad_reduce_in_fp32=True)), ddp=DDP3(), allow=(name,))
    assert report.ok and [m.name for m in report.allowed] == ["ddp.grad_reduce_in_fp32"]


def test_the_report_records_are_frozen_and_keyword_only() -> None:
    [mismatch] = judge(Transformer(), Chunk(Transformer(hidden_size=32, kv_channels=16))).mismatches
    with pytest.raises(dataclasses.FrozenInstanceError):
        mismatch.found = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Requested({"a": 1})  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        DERIVATIONS[0].reason = "x"  # type: ignore[misc]


def test_a_value_of_exactly_80_characters_is_kept_whole() -> None:
    @dataclass
    class Named:
        name: str = "x"

    text = "y" * 79  # its repr is 81 characters
    [cut] = compare_settings(requested(Named()), [("transformer", Named(name=text), "c")]).mismatches
    assert cut.found == repr(text)[:77] + "..."
    [whole] = compare_settings(requested(Named()), [("transformer", Named(name="y" * 78), "c")]).mismatches
    assert whole.found == repr("y" * 78) and len(whole.found) == 80


def test_what_was_asked_and_the_report_cannot_be_changed_afterwards() -> None:
    wanted = requested(Transformer())
    report = judge(Transformer(), Chunk(Transformer()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        wanted.transformer = {}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.compared = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        Mismatch("transformer", "f", "not-landed", "1", "2", "here")  # type: ignore[misc]


def test_reports_and_derivations_take_keywords_only() -> None:
    with pytest.raises(TypeError):
        SettingsReport(("chunk 0's config",), 3)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Derivation("ddp", "x", "why", lambda r, f, fields: True)  # type: ignore[misc]


@dataclass
class OlderTransformer:
    """The same config as another megatron-core release has it: no `recompute_method` field at all."""

    hidden_size: int = 64
    num_attention_heads: int = 4
    kv_channels: int | None = 16
    recompute_granularity: str | None = None
    layers: list[int] = field(default_factory=lambda: [1, 2])
    init_method: object = None
    finalize_model_grads_func: object = None


def test_a_field_asked_for_that_the_models_config_does_not_have_at_all_did_not_land() -> None:
    asked = Transformer()
    asked.init_method = None  # as the older config holds it: only the missing field differs
    report = compare_settings(requested(asked), [("transformer", OlderTransformer(), "chunk 0's config")])
    [missing] = report.mismatches
    assert (missing.field, missing.kind, missing.requested, missing.found) == (
        "recompute_method",
        "not-landed",
        "None",
        "no such field",
    )
    assert missing.line() == "recompute_method: requested None, found no such field on chunk 0's config"
    with pytest.raises(SettingsNotLanded, match="recompute_method: requested None, found no such field"):
        report.raise_if_bad()


def test_a_config_that_is_no_dataclass_has_none_of_the_fields_asked_for() -> None:
    asked = Transformer()
    report = compare_settings(requested(asked), [("transformer", object(), "chunk 0's config")])
    assert set(report.fields()) == {f.name for f in dataclasses.fields(Transformer)} - {"finalize_model_grads_func"}
    assert {m.found for m in report.mismatches} == {"no such field"}


@dataclass
class Dropouts:
    hidden_size: int = 64
    hidden_dropout: float = 0.1
    hidden_size_per_head: int = 16


@pytest.mark.parametrize("name", ["hidden", "hidden_size", "transformer.hidden_size", "hidden_*"])
def test_allow_mismatch_accepts_exact_field_names_only_never_a_field_that_shares_a_prefix(name: str) -> None:
    """Allowing `hidden_size` accepts a changed hidden_size; a dropped hidden_dropout and a changed
    hidden_size_per_head are still reported, and a name that is no field allows nothing."""
    found = Dropouts(hidden_size=32, hidden_dropout=0.0, hidden_size_per_head=8)
    report = compare_settings(requested(Dropouts()), [("transformer", found, "chunk 0's config")], [name])
    exact = name in ("hidden_size", "transformer.hidden_size")
    rest = ("hidden_dropout", "hidden_size_per_head")
    assert report.fields() == (rest if exact else ("hidden_size", *rest))
    assert [m.field for m in report.allowed] == (["hidden_size"] if exact else [])
    assert report.unknown_allowed == (() if exact else (name,))


def test_a_section_field_is_allowed_only_under_its_own_section() -> None:
    asked = Transformer()
    wanted = requested(asked, DDP3())
    changed = [("transformer", asked, "chunk 0's config"), ("ddp", DDP3(bucket_size=1), "chunk 0's DDP config")]
    report = compare_settings(wanted, changed, ["optimizer.bucket_size", "transformer.bucket_size"])
    assert report.fields() == ("ddp.bucket_size",) and report.allowed == ()
    assert report.unknown_allowed == ("optimizer.bucket_size", "transformer.bucket_size")


@dataclass
class Unset:
    """A config class that declares `recompute_method` but whose instance never set it."""

    hidden_size: int = 64
    recompute_method: str | None = field(init=False)


def test_a_field_declared_but_never_set_on_the_models_config_did_not_land_even_where_none_was_asked() -> None:
    @dataclass
    class Asked:
        hidden_size: int = 64
        recompute_method: str | None = None

    report = compare_settings(requested(Asked()), [("transformer", Unset(), "chunk 0's config")])
    [unset] = report.mismatches
    assert (unset.field, unset.requested, unset.found) == ("recompute_method", "None", "no such field")
