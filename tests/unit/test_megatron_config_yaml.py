"""`--megatron-config FILE` (`run_config_from_yaml`): the file is read as data and checked before
anything of it runs, and before megatron is imported; each refusal is one line naming the file, what
is wrong and the fix. Megatron's own modules are stood in for (tests/fake_megatron.py) where a file
passes the checks; where it does not, the real ones would be imported, and the unit layer's check
(tests/unit/conftest.py) would fail the test."""

from __future__ import annotations

import os
import pathlib
import sys
from pathlib import Path

import pytest

from lifecycle import RunConfig
from lifecycle.cli.run import overridden
from lifecycle.errors import ConfigError
from lifecycle.testing import run_config_from_yaml
from tests import fake_megatron

CONTAINER = "_target_: megatron.training.config.container.PretrainConfigContainer\n"
# The top-level target of a file the stand-ins accept (megatron.configs.Config: a megatron dataclass).
ACCEPTED = "_target_: megatron.configs.Config\n"
# A config the stand-ins derive a RunConfig from: every check passed.
MODEL = (
    "model:\n  num_layers: 2\n  seq_length: 128\ntrain:\n  micro_batch_size: 1\n  global_batch_size: 2\n"
    "optimizer:\n  lr: 0.001\ntokenizer:\n  tokenizer_type: NullTokenizer\n  vocab_size: 512\n"
)


def refusal(path: Path, **kwargs: bool) -> str:
    with pytest.raises(ConfigError) as caught:
        run_config_from_yaml(str(path), **kwargs)
    assert caught.value.field == "megatron_config"
    message = str(caught.value)
    assert message.startswith(f"--megatron-config {path}: ") and "\n" not in message
    return message.removeprefix(f"--megatron-config {path}: ")


NOT_YAML = "not YAML line 2: expected ',' or ']', but got ':'"


def written(tmp_path: Path, text: str | bytes, name: str = "megatron.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_a_missing_file_is_refused_naming_what_to_give(tmp_path: Path) -> None:
    assert refusal(tmp_path / "missing.yaml") == "no such file; give the YAML Megatron-LM's to_yaml wrote"


def test_a_directory_is_refused_as_not_a_regular_file(tmp_path: Path) -> None:
    assert refusal(tmp_path) == "not a regular file; give the YAML Megatron-LM's to_yaml wrote"


def test_a_path_that_cannot_be_looked_at_says_why(tmp_path: Path) -> None:
    file = written(tmp_path, CONTAINER)
    assert refusal(file / "below") == "cannot be read (Not a directory)"


def test_a_file_that_cannot_be_opened_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = written(tmp_path, CONTAINER)

    def denied(self: Path, *args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "open", denied)
    assert refusal(file) == "cannot be read (Permission denied)"


def test_a_file_of_more_than_a_megabyte_is_refused_and_one_of_a_megabyte_is_read(tmp_path: Path) -> None:
    body = "a: [1\nb: 2\n# "  # not YAML at its second line: read, then refused at once
    exact = written(tmp_path, body + "x" * ((1 << 20) - len(body) - 1) + "\n", "exact.yaml")
    assert exact.stat().st_size == 1 << 20
    assert refusal(exact) == NOT_YAML
    big = written(tmp_path, body + "x" * (1 << 20) + "\n", "big.yaml")
    size = big.stat().st_size
    assert refusal(big) == f"{size} bytes, more than a config's 1048576; give the config, not data"


def test_a_file_that_grew_past_a_megabyte_after_its_size_was_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size is read first, then at most one byte more than the bound: a file growing between
    the two is refused too."""
    body = "a: [1\nb: 2\n# "
    for size, fits in ((1 << 20, True), ((1 << 20) + 1, False)):
        grown = written(tmp_path, body + "x" * (size - len(body) - 1) + "\n", f"grown{size}.yaml")
        real = pathlib.Path.stat

        def small(self: Path, *args: object, real: object = real, **kwargs: object) -> os.stat_result:
            info = real(self, *args, **kwargs)  # type: ignore[operator]
            return os.stat_result((info.st_mode, *info[1:6], 10, *info[7:]))

        with monkeypatch.context() as patched:
            patched.setattr(pathlib.Path, "stat", small)
            why = refusal(grown)
        assert why == (NOT_YAML if fits else "more than a config's 1048576 bytes; give the config, not data")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a: [1, 2\nb: 3\n", "not YAML line 2: expected ',' or ']', but got ':'"),
        ("a: 1\n---\nb: 2\n", "not YAML line 2: but found another document"),
        (
            "a: !!python/object/apply:os.system ['true']\n",
            "not YAML line 1: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/object/apply:os.system'",
        ),
    ],
)
def test_a_file_that_is_not_safe_yaml_is_refused_with_its_line(tmp_path: Path, text: str, why: str) -> None:
    assert refusal(written(tmp_path, text)) == why


def test_a_file_that_is_not_text_is_refused_in_one_line(tmp_path: Path) -> None:
    binary = written(tmp_path, b"_target_: megatron.configs.Config\nx: \x80\x81\n")
    assert refusal(binary) == "not YAML: unacceptable character #x0080: invalid start byte"


@pytest.mark.parametrize("text", ["- a\n- b\n", "model: {num_layers: 2}\n", "just text\n"])
def test_a_file_without_a_top_level_target_is_not_a_container(tmp_path: Path, text: str) -> None:
    assert refusal(written(tmp_path, text)) == "not a Megatron-LM PretrainConfigContainer YAML (no top-level _target_)"


def aliases(count: int) -> str:
    return "x: &x [1, 2]\ny: [" + ", ".join(["*x"] * count) + "]\n"


def test_more_than_64_aliases_are_refused_and_64_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = written(tmp_path, CONTAINER + aliases(65), "many.yaml")
    assert refusal(many) == "has more than 64 YAML aliases; write the values out"
    recorded = fake_megatron.install(monkeypatch)
    run_config_from_yaml(str(written(tmp_path, ACCEPTED + MODEL + aliases(64))))
    assert recorded.plain[0]["y"] == [[1, 2]] * 64  # type: ignore[index]


def interpolations(count: int) -> str:
    return "z: 3\nrefs: [" + ", ".join(["'${z}'"] * count) + "]\n"


def test_more_than_64_interpolations_are_refused_and_64_are_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    many = written(tmp_path, CONTAINER + interpolations(65), "many.yaml")
    assert refusal(many) == "has 65 YAML aliases and ${...} interpolations, more than 64; write them out"
    mixed = written(tmp_path, CONTAINER + interpolations(33) + aliases(32), "mixed.yaml")
    assert refusal(mixed) == "has 65 YAML aliases and ${...} interpolations, more than 64; write them out"
    recorded = fake_megatron.install(monkeypatch)
    run_config_from_yaml(str(written(tmp_path, ACCEPTED + MODEL + interpolations(64))))
    assert recorded.plain[0]["refs"] == [3] * 64  # type: ignore[index]


def expanding(extra: int) -> str:
    """199,999 + `extra` values once the 63 aliases are expanded (keys count, and so does the
    top-level mapping)."""
    return (
        "_target_: x\na: &a [" + ", ".join(["1"] * 3123) + "]\nb: [" + ", ".join(["*a"] * 63) + "]\n"
        "c: [" + ", ".join(["1"] * (55 + extra)) + "]\n"
    )


def test_a_file_expanding_past_200000_values_is_refused_before_the_expansion_is_walked(tmp_path: Path) -> None:
    assert refusal(written(tmp_path, expanding(2))) == (
        "expands to more than 200000 values (YAML aliases); write the values out"
    )
    # 200,000 values exactly: counted, then refused for its target (x is no config class)
    assert refusal(written(tmp_path, expanding(1))).startswith("(top): _target_ 'x' is not")
    levels = "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 12)}]\n" for i in range(1, 6))
    bomb = written(tmp_path, CONTAINER + levels, "bomb.yaml")  # 60 aliases, 12**5 values once expanded
    assert refusal(bomb) == "expands to more than 200000 values (YAML aliases); write the values out"


def foreign(where: str, target: str) -> str:
    return (
        f"{where}: _target_ {target!r} is not one of megatron's config classes, and loading it would run it; "
        "remove it, or pass --allow-targets to let Megatron-LM's own allowlist decide"
    )


@pytest.mark.parametrize(
    ("text", "where", "target"),
    [
        ("_target_: builtins.exec\n", "(top)", "builtins.exec"),
        (
            CONTAINER + "model:\n  transformer:\n    autocast_dtype:\n      _target_: torch.save\n",
            "model.transformer.autocast_dtype",
            "torch.save",
        ),
        (CONTAINER + "layers:\n  - a: 1\n  - _target_: os.system\n", "layers[1]", "os.system"),
        (CONTAINER + "m:\n  - [1, {_target_: os.system}]\n", "m[0][1]", "os.system"),
        (CONTAINER + "dtype: {_target_: torch.float16}\n", "dtype", "torch.float16"),  # called: torch.float16()
        (CONTAINER + "dtype: {_target_: torch.float16, _call_: 0}\n", "dtype", "torch.float16"),
        (CONTAINER + "dtype: {_target_: torch.save, _call_: false}\n", "dtype", "torch.save"),
        (CONTAINER + "dtype: {_target_: xtorch.float16, _call_: false}\n", "dtype", "xtorch.float16"),
        (CONTAINER + "dtype: {_target_: my.torch.float16, _call_: false}\n", "dtype", "my.torch.float16"),
        (CONTAINER + "s: {_target_: signal.signal}\n", "s", "signal.signal"),
        (CONTAINER + "s: {_target_: xmegatron.Config}\n", "s", "xmegatron.Config"),
    ],
)
def test_a_target_outside_megatrons_config_classes_is_refused_naming_its_field(
    tmp_path: Path, text: str, where: str, target: str
) -> None:
    assert refusal(written(tmp_path, text)) == foreign(where, target)


@pytest.mark.parametrize(
    "target",
    [
        "megatron.missing.Config",
        "megatron.configs.Missing",
        "megatron.configs.Plain",
        "megatron.configs.function",
        "megatron.configs.Foreign",
    ],
)
def test_a_megatron_target_that_is_no_config_class_is_refused_before_megatron_builds_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    recorded = fake_megatron.install(monkeypatch)
    path = written(tmp_path, ACCEPTED + MODEL + f"extra:\n  sub: {{_target_: {target}}}\n")
    assert refusal(path) == foreign("extra.sub", target)
    assert recorded.plain == []


@pytest.mark.parametrize("error", [ValueError("no such plugin"), ImportError("needs a GPU")])
def test_a_megatron_target_whose_module_fails_to_import_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    class Failing:
        """A finder whose import of megatron.broken raises `error`, as a module's own code may."""

        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> None:
            if name == "megatron.broken":
                raise error

    recorded = fake_megatron.install(monkeypatch)
    monkeypatch.setattr(sys, "meta_path", [Failing(), *sys.meta_path])
    path = written(tmp_path, ACCEPTED + MODEL + "extra: {_target_: megatron.broken.Config}\n")
    assert refusal(path) == foreign("extra", "megatron.broken.Config")
    assert recorded.plain == []


def test_config_classes_torch_dtypes_and_signals_are_read_and_handed_to_megatron_leniently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = fake_megatron.install(monkeypatch)
    targets = (
        "kind: {_target_: megatron.configs.Kind, _args_: [1]}\n"
        "dtype: {_target_: torch.bfloat16, _call_: false}\n"
        "fp8: {_target_: torch.float8_e4m3fn, _call_: false}\n"
        "sig: {_target_: signal.Signals, _args_: [15]}\n"
    )
    text = ACCEPTED + MODEL + targets
    config = run_config_from_yaml(str(written(tmp_path, text)))
    assert config.model.num_layers == 2 and config.model.seq_length == 128
    assert recorded.modes == [fake_megatron.Mode.LENIENT]
    assert recorded.plain[0]["dtype"] == {"_target_": "torch.bfloat16", "_call_": False}  # type: ignore[index]


def test_allow_targets_leaves_the_targets_to_megatron(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = fake_megatron.install(monkeypatch)
    text = CONTAINER + MODEL + "x: {_target_: torch.save}\ny: {_target_: megatron.configs.Plain}\n"
    run_config_from_yaml(str(written(tmp_path, text)), allow_targets=True)
    assert recorded.plain[0]["x"] == {"_target_": "torch.save"}  # type: ignore[index]
    # the other checks still hold
    assert refusal(written(tmp_path, CONTAINER + aliases(65), "many.yaml"), allow_targets=True) == (
        "has more than 64 YAML aliases; write the values out"
    )


DTYPES = (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bfloat16", "bool", "half", "float", "double", "long", "int", "short", "complex64", "complex128",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
)  # fmt: skip


def test_every_torch_dtype_is_read_as_a_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = fake_megatron.install(monkeypatch)
    fields = "".join(f"d_{name}: {{_target_: torch.{name}, _call_: false}}\n" for name in DTYPES)
    run_config_from_yaml(str(written(tmp_path, ACCEPTED + MODEL + fields)))
    assert {k: v for k, v in recorded.plain[0].items() if k.startswith("d_")} == {  # type: ignore[union-attr]
        f"d_{name}": {"_target_": f"torch.{name}", "_call_": False} for name in DTYPES
    }
    for name in ("float8", "int128", "uint", "cfloat", "qint8"):
        field = f"d: {{_target_: torch.{name}, _call_: false}}\n"
        assert refusal(written(tmp_path, CONTAINER + field, f"{name}.yaml")) == foreign("d", f"torch.{name}")


def test_each_set_that_changes_a_value_of_the_yaml_is_reported_once() -> None:
    derived = RunConfig.preset("tiny-gpt")
    overrides = ["training.seed=7", " optimizer.lr = 0.5", f"training.steps={derived.training.steps}"]
    changed = RunConfig.from_dict(derived.to_dict(), overrides)
    assert overridden(derived, changed, overrides, "m.yaml") == [
        "--set training.seed=7 overrides training.seed = 1234 from --megatron-config m.yaml",
        "--set optimizer.lr=0.5 overrides optimizer.lr = 0.001 from --megatron-config m.yaml",
    ]  # the steps it sets to what the YAML says are not reported
    assert overridden(derived, derived, [], "m.yaml") == []
