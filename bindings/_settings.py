"""Whether what was asked for is what the model that trains carries: `check_settings`' judgement.

The seed bug (callbacks on a config the model copied) is one case of a larger class: a setting that
never reaches the model that trains, with no error. A provider rebuilds its config and drops the
overrides, sets a field on an object the model does not hold, guards an assignment with `hasattr`,
or sets a field after megatron's `__post_init__` validated the config. Each leaves the config the
scheduler and the layers read (`get_model_config(model[i])`) different from the one asked for.

`Requested` is what was asked, copied field by field before a provider or megatron saw the objects
(`requested(...)`). `compare` judges every object the runtime reads against it, section by section
(the chunks' TransformerConfigs, each DDP wrapper's config, the optimizer's config), and re-runs
each object's `__post_init__` on a copy of its current fields: a field changed after finalization
shows as a value megatron would derive differently, or as a combination it refuses.
What megatron itself legitimately changes is in `_derivations.py`, each with its reason.
Imports neither torch nor megatron.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, TypedDict, TypeVar

from bindings._derivations import derived
from bindings._errors import SettingsNotLanded
from bindings._protocol import SLOTS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Section = Literal["transformer", "ddp", "optimizer"]
Kind = Literal["not-landed", "changed-after-validation", "invalid"]
C = TypeVar("C", bound="DataclassInstance")

_SKIPPED: Final[frozenset[str]] = frozenset(SLOTS)
"""The callback slots: bound after MODEL_BUILT and judged by `bindings.check`, not here."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Requested:
    """What was asked for, by section: field → value, copied before anything built from it.
    `asked_as` maps a field to the name the user set it by (`model.hidden_dropout`)."""

    transformer: Mapping[str, object]
    ddp: Mapping[str, object] | None = None
    optimizer: Mapping[str, object] | None = None
    asked_as: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    def sections(self) -> list[tuple[Section, Mapping[str, object]]]:
        both: list[tuple[Section, Mapping[str, object] | None]] = [
            ("transformer", self.transformer),
            ("ddp", self.ddp),
            ("optimizer", self.optimizer),
        ]
        return [(name, fields) for name, fields in both if fields is not None]


def fields_of(obj: object) -> dict[str, object]:
    """A dataclass instance's fields and their values now (lists, dicts and sets copied), without
    the callback slots and without a field the instance never set (it has no value to compare: it is
    missing, not None); {} for anything that is not a dataclass instance."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return {}
    out = {}
    unset = object()
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name, unset)
        if f.name not in _SKIPPED and value is not unset:
            out[f.name] = type(value)(value) if isinstance(value, (list, dict, set)) else value
    return out


def requested(
    transformer: object,
    ddp: DataclassInstance | None = None,
    optimizer: DataclassInstance | None = None,
    *,
    asked_as: Mapping[str, str] | None = None,
) -> Requested:
    """`Requested` from the configs as they are now: call it before the provider, DDP and the
    optimizer see them (they may change them in place). `transformer` is the config the provider is
    given, or a provider object that is its own config; megatron's DDP and optimizer configs are
    dataclasses. Each is read by `fields_of`."""
    return Requested(
        transformer=MappingProxyType(fields_of(transformer)),
        ddp=None if ddp is None else MappingProxyType(fields_of(ddp)),
        optimizer=None if optimizer is None else MappingProxyType(fields_of(optimizer)),
        asked_as=MappingProxyType(dict(asked_as or {})),
    )


def same_value(a: object, b: object) -> bool:
    """Whether two field values are the same setting: `==` for values of one type (identity where
    `==` fails or is not a bool, as for tensors), and `functools.partial` by function and arguments
    (megatron's init methods are partials; a copied config holds a new one)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, functools.partial) and isinstance(b, functools.partial):
        return (
            a.func is b.func
            and len(a.args) == len(b.args)
            and all(same_value(x, y) for x, y in zip(a.args, b.args, strict=True))
            and a.keywords.keys() == b.keywords.keys()
            and all(same_value(v, b.keywords[k]) for k, v in a.keywords.items())
        )
    try:
        equal = a == b
    except Exception:  # objects whose == raises (some tensors) compare by identity
        return False
    return equal if isinstance(equal, bool) else False


def show(value: object) -> str:
    """A value as the report prints it: repr, partials as `normal_(std=0.02)`, cut at 80 characters."""
    if isinstance(value, functools.partial):
        args = [repr(a) for a in value.args] + [f"{k}={v!r}" for k, v in value.keywords.items()]
        text = f"{getattr(value.func, '__name__', type(value.func).__name__)}({', '.join(args)})"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True, slots=True, kw_only=True)
class Mismatch:
    """One setting that did not land: which field, what was asked, what was found, and where."""

    section: Section
    field: str
    kind: Kind
    requested: str
    found: str
    where: str
    asked_as: str | None = None

    @property
    def name(self) -> str:
        return self.field if self.section == "transformer" else f"{self.section}.{self.field}"

    def line(self) -> str:
        asked = f" ({self.asked_as})" if self.asked_as else ""
        if self.kind == "invalid":
            return f"{self.name}: megatron's validation refuses {self.where} as it is now: {self.found}"
        if self.kind == "changed-after-validation":
            return (
                f"{self.name}: {self.found} on {self.where}, but megatron's __post_init__ derives "
                f"{self.requested} from its fields now: a field was set after the config was validated"
            )
        return f"{self.name}{asked}: requested {self.requested}, found {self.found} on {self.where}"

    def log_fields(self) -> dict[str, str]:
        """Its fields, each a string, without `asked_as` where it is None."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


class SettingsFields(TypedDict):
    """The fields of the `settings_checked` record that `SettingsReport.log_fields` gives."""

    objects: list[str]
    compared: int
    mismatches: list[dict[str, str]]
    allowed: list[dict[str, str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingsReport:
    """What `check_settings` found: the objects compared, the fields compared, every mismatch (and
    the ones `allow` accepted), and `allow` entries that name no field."""

    objects: tuple[str, ...]
    compared: int
    mismatches: tuple[Mismatch, ...] = ()
    allowed: tuple[Mismatch, ...] = ()
    unknown_allowed: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def fields(self) -> tuple[str, ...]:
        """The names of the fields that did not land, each once, in report order."""
        return tuple(dict.fromkeys(m.name for m in self.mismatches))

    def render(self) -> str:
        head = (
            f"settings check: {'ok' if self.ok else 'NOT LANDED'} ({self.compared} fields compared on "
            f"{len(self.objects)} object{'s' if len(self.objects) != 1 else ''}"
            + (f"; {len(self.allowed)} allowed by settings.allow_mismatch" if self.allowed else "")
            + ")"
        )
        lines = ["  " + m.line() for m in self.mismatches]
        lines += ["  allowed: " + m.line() for m in self.allowed]
        return "\n".join([head, *lines])

    def log_fields(self) -> SettingsFields:
        return {
            "objects": list(self.objects),
            "compared": self.compared,
            "mismatches": [m.log_fields() for m in self.mismatches],
            "allowed": [m.log_fields() for m in self.allowed],
        }

    def raise_if_bad(self) -> None:
        """Raise `SettingsNotLanded` with one line per field that did not land, and the fix."""
        if self.ok:
            return
        raise SettingsNotLanded(
            f"{len(self.fields())} setting{'s' if len(self.fields()) != 1 else ''} did not reach the model "
            "that trains:\n"
            + "\n".join("  " + m.line() for m in self.mismatches)
            + "\nFix: set them on the config your provider is given (or pass it on to the model), before "
            "megatron validates it; or accept one knowingly with settings.allow_mismatch=[field, ...]",
            fields=list(self.fields()),
            mismatches=[m.log_fields() for m in self.mismatches],
        )


Target = tuple[Section, "DataclassInstance", str]
"""One object the runtime reads: its section, the object (a megatron config, a dataclass), and where
it is (`chunk 0's config`)."""


def compare(requested: Requested, targets: Sequence[Target], allow: Iterable[str] = ()) -> SettingsReport:
    """Judge every target against `requested`, and each target's fields against its own
    `__post_init__`; mismatches whose field (or `section.field`) is in `allow` are accepted."""
    asked = dict(requested.sections())
    found: list[Mismatch] = []
    compared = 0
    for section, obj, where in targets:
        wanted = asked.get(section)
        if wanted is None:
            continue
        now = fields_of(obj)
        compared += len(wanted)
        found += _differences(section, wanted, now, where, requested.asked_as)
        found += _refinalized(section, obj, now, where)
    accepted = frozenset(allow)
    known = {f for _, fields in requested.sections() for f in fields}
    known |= {f"{s}.{f}" for s, fields in requested.sections() for f in fields}
    return SettingsReport(
        objects=tuple(where for section, _, where in targets if section in asked),
        compared=compared,
        mismatches=tuple(m for m in found if not _allowed(m, accepted)),
        allowed=tuple(m for m in found if _allowed(m, accepted)),
        unknown_allowed=tuple(sorted(accepted - known)),
    )


def _allowed(m: Mismatch, accepted: frozenset[str]) -> bool:
    return m.field in accepted or m.name in accepted or f"{m.section}.{m.field}" in accepted


def _differences(
    section: Section, wanted: Mapping[str, object], now: Mapping[str, object], where: str, asked_as: Mapping[str, str]
) -> list[Mismatch]:
    out = []
    missing = object()
    for name, value in wanted.items():
        current = now.get(name, missing)
        if current is not missing and same_value(value, current):
            continue
        if current is not missing and derived(section, name, value, current, now):
            continue
        out.append(
            Mismatch(
                section=section,
                field=name,
                kind="not-landed",
                requested=show(value),
                found="no such field" if current is missing else show(current),
                where=where,
                asked_as=asked_as.get(f"{section}.{name}") or asked_as.get(name),
            )
        )
    return out


def _refinalized(section: Section, obj: DataclassInstance, now: Mapping[str, object], where: str) -> list[Mismatch]:
    """Run `obj`'s `__post_init__` again on a copy of its fields (`dataclasses.replace`): a field it
    derives differently, or a refusal, means a field was set after validation."""
    if not now or not hasattr(obj, "__post_init__"):
        return []
    try:
        again = _rebuilt(obj)
    except Exception as exc:  # megatron's validation refuses the fields as they are now
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return [Mismatch(section=section, field="__post_init__", kind="invalid", requested="", found=text, where=where)]
    redone = fields_of(again)
    return [
        Mismatch(
            section=section,
            field=name,
            kind="changed-after-validation",
            requested=show(redone[name]),
            found=show(value),
            where=where,
        )
        for name, value in now.items()
        if name in redone and not same_value(value, redone[name])
    ]


def _rebuilt(obj: C) -> C:
    """A new instance of `obj`'s class from its init fields (lists, dicts, sets copied, so a
    `__post_init__` that edits them in place leaves `obj` alone), warnings silenced."""
    kwargs = {}
    for f in dataclasses.fields(obj):
        if f.init:
            value = getattr(obj, f.name)
            kwargs[f.name] = type(value)(value) if isinstance(value, (list, dict, set)) else value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return type(obj)(**kwargs)
