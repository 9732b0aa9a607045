"""The records of process groups (docs/failures.md#every-groups-timeout): every group's
timeout read back at DISTRIBUTED's exit, and each group created later (`lifecycle.log.schema` puts
them in order)."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from lifecycle.log._schema_base import Record

Groups = Annotated[
    list[dict[str, object]],
    Meta(
        description="each group this rank is in: name (megatron's group_desc, else its global), backend, size, "
        "timeout_s (read back from the backend: null when it has none to read), created_by (module:function of "
        "the first caller outside torch), connect_s (seconds its creation took: gloo connects then), "
        "corrected_from (only when the lifecycle set the configured timeout on "
        "a group megatron made with another one)"
    ),
]


class TimeoutsRead(Record, frozen=True, kw_only=True, tag="timeouts_read"):
    """At DISTRIBUTED's exit, every timeout read back from what holds it, not from what was passed;
    audit rule LA028 reads it."""

    configured_s: Annotated[
        float, Meta(description="`startup.timeout_s`: what every group and each state's wait should have")
    ]
    world_s: Annotated[float | None, Meta(description="the default process group's timeout, read back")]
    store_s: Annotated[float | None, Meta(description="the rendezvous store's timeout (null: none to read)")]
    watch_s: Annotated[float | None, Meta(description="the rank watch's deadline for a state's work (null: no watch)")]
    groups: Groups
    corrected: Annotated[int, Meta(description="groups whose timeout the lifecycle set to `configured_s`")]


class GroupCreated(Record, frozen=True, kw_only=True, tag="group_created"):
    """A process group created after DISTRIBUTED (by a provider, a hook, the training loop): logged
    before its first collective. LA028 reads its timeout, LA029 a group created after CALLBACKS_BOUND."""

    name: Annotated[str, Meta(description="its group_desc, else torch's group name")]
    backend: Annotated[str | None, Meta(description="its backend(s), as torch names them")]
    size: Annotated[int, Meta(description="its ranks")]
    timeout_s: Annotated[float | None, Meta(description="its timeout, read back (null: none to read)")]
    created_by: Annotated[str, Meta(description="module:function:line of the first caller outside torch")]
    connect_s: Annotated[float, Meta(description="seconds its creation took (gloo connects every pair then)")]
    member: Annotated[bool | UnsetType, Meta(description="false when this rank is not in it")] = UNSET
