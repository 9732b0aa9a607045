"""The restart wrapper as `InProcessRestart` builds it (its timeouts, read back) and
nvidia-resiliency-ext's own exceptions, told apart as `InProcessRestart` needs (its real classes):
the restart request a rank receives when another rank failed (that rank must not name itself as the
cause, also where the request landed inside a transition and came back chained under the engine's
error), the wrapper's giving up (`RestartAbort`: RestartsExhausted follows, naming why), and its
CallWrapper injected into `CallWrapperSlot` only where nvidia-resiliency-ext imports."""

from __future__ import annotations

import sys

import pytest

from lifecycle.errors import PhaseFailed
from lifecycle.resilience import CallWrapperSlot
from lifecycle.testing import installed_problem, is_restart_abort, is_restart_request, restart_wrap

PROBLEM = installed_problem()
if PROBLEM is not None:
    pytest.skip(PROBLEM, allow_module_level=True)


def _request() -> BaseException:
    from nvidia_resiliency_ext.inprocess.monitor_thread import RankShouldRestart

    return RankShouldRestart()


def _under(inner: BaseException, *, cause: bool) -> BaseException:
    outer = PhaseFailed("start_services failed in VALIDATED: the wrapper's request")
    if cause:
        outer.__cause__ = inner
    else:
        outer.__context__ = inner
    return outer


def test_the_wrappers_restart_request_is_told_apart_from_a_ranks_own_failure() -> None:
    assert is_restart_request(_request())
    assert not is_restart_request(RuntimeError("injected fault"))
    assert not is_restart_request(_under(RuntimeError("injected fault"), cause=True))


@pytest.mark.parametrize("cause", [True, False], ids=["raised from it", "raised while handling it"])
def test_a_restart_request_chained_under_the_engines_error_is_still_a_restart_request(cause: bool) -> None:
    assert is_restart_request(_under(_request(), cause=cause))
    assert is_restart_request(_under(_under(_request(), cause=cause), cause=not cause))


def test_a_chain_that_loops_ends_and_is_no_restart_request() -> None:
    looped = RuntimeError("its own context")
    looped.__context__ = _under(looped, cause=True)
    assert not is_restart_request(looped)


def test_only_the_wrappers_giving_up_is_a_restart_abort() -> None:
    from nvidia_resiliency_ext.inprocess.exception import RestartAbort

    assert is_restart_abort(RestartAbort("state.iteration=2 self.max_iterations=2"))
    assert not is_restart_abort(_request())
    assert not is_restart_abort(RuntimeError("injected fault"))


def test_nvrx_injects_its_call_wrapper_into_the_slot_and_nothing_else() -> None:
    from nvidia_resiliency_ext.inprocess import CallWrapper

    assert issubclass(CallWrapper, CallWrapperSlot)
    assert issubclass(type("Mine", (CallWrapper,), {}), CallWrapperSlot)
    assert not issubclass(object, CallWrapperSlot)
    assert not issubclass(type("CallWrapper", (), {}), CallWrapperSlot)


def test_where_nvrx_does_not_import_nothing_is_its_call_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    from nvidia_resiliency_ext.inprocess import CallWrapper

    monkeypatch.setitem(sys.modules, "nvidia_resiliency_ext.inprocess", None)  # its import now fails
    assert not issubclass(CallWrapper, CallWrapperSlot)


@pytest.mark.parametrize(
    ("timeout_s", "expected"),
    [
        (4.5, {"soft_s": 13.5, "hard_s": 27.0, "barrier_s": 40.5, "completion_s": 40.5, "heartbeat_s": 27.0}),
        (20.0, {"soft_s": 60.0, "hard_s": 120.0, "barrier_s": 180.0, "completion_s": 180.0, "heartbeat_s": 30.0}),
    ],
)
def test_the_wrappers_timeouts_follow_startup_timeout_s(timeout_s: float, expected: dict[str, float]) -> None:
    """soft 3 x `startup.timeout_s`, hard 2 x soft, barrier and completion 3 x soft, heartbeat 2 x
    soft up to 30 s (docs/restart.md), as the wrapper keeps them; building it starts nothing."""
    import inspect
    import threading

    from nvidia_resiliency_ext.inprocess import CallWrapper

    threads = threading.active_count()
    call, timeouts = restart_wrap(lambda cw: cw, max_cycles=3, min_world_size=2, port=None, timeout_s=timeout_s)
    assert timeouts == expected and threading.active_count() == threads
    [param] = inspect.signature(call).parameters.values()  # where nvrx injects its CallWrapper
    assert param.annotation is CallWrapper
