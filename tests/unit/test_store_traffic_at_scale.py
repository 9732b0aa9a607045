"""The rank watch's load on the store host grows with nodes, not ranks: the real `RankWatch` of every
rank of a job run against a counting store (`lifecycle simulate --scale`, docs/simulate.md)."""

from __future__ import annotations

import pytest

from lifecycle.simulate import StoreHost, count_watch
from lifecycle.testing import CountingStore


def test_in_steady_state_only_one_rank_a_node_talks_to_the_store() -> None:
    watch = count_watch(64, 8)

    steady = watch.phases["steady"]
    assert watch.nodes == watch.leaders == 8
    assert len(steady.rank_ops) == 8  # the node leaders; the other 56 ranks read their node's board
    assert watch.phases["check_in"].rank_ops.keys() == set(range(0, 64, 8))  # each node's leader checks it in
    assert watch.connections == 64 + 8  # a connection a rank, and one watch connection a node


def test_twice_the_ranks_a_node_add_no_store_traffic_in_steady_state() -> None:
    eight, sixteen = count_watch(64, 8), count_watch(128, 16)

    assert sixteen.nodes == eight.nodes
    assert sixteen.ops_per_s == eight.ops_per_s
    assert sixteen.connections == 128 + 8


def test_the_check_in_costs_a_few_operations_a_node_whatever_the_ranks_a_node() -> None:
    eight, sixteen = count_watch(64, 8), count_watch(128, 16)

    startup = [w.phases["check_in"].total + w.phases["join"].total for w in (eight, sixteen)]
    assert startup == [8 * 11 + 2] * 2  # a node: 9 at check-in, 2 in its first round; the last node 2 more


def test_the_host_load_stays_bounded_as_nodes_grow() -> None:
    small = count_watch(256, 8)
    large = count_watch(16384, 8, full_nodes=32, sample_nodes=32)  # every rank checks in; 32 nodes watch

    assert large.ops_per_s > small.ops_per_s
    assert large.interval_s > large.poll_s  # the rounds slow down once the nodes would exceed the host's budget
    assert large.ops_per_s <= 6600  # twice torchrun's own keepalive load at 16,384 nodes


def test_counts_from_a_sample_of_nodes_match_the_count_of_every_node() -> None:
    full = count_watch(512, 8)
    sampled = count_watch(512, 8, full_nodes=8, sample_nodes=16)

    assert sampled.sampled_nodes == 16 and full.sampled_nodes == full.nodes == 64
    assert sampled.ops_per_s == pytest.approx(full.ops_per_s)
    assert sampled.connections == full.connections
    assert sampled.phases["check_in"].total == full.phases["check_in"].total  # every rank's check-in, counted


def test_the_counting_store_keeps_one_key_space_for_every_connection_and_counts_each() -> None:
    host = StoreHost()
    one: CountingStore = host.connect(0)
    other = host.connect(1).clone()
    one.set("k", b"v")
    assert other.get("k") == b"v" and other.add("n", 2) == 2 and one.add("n", 1) == 3
    assert one.compare_set("first", b"", b"x") == b"x" and other.compare_set("first", b"", b"y") == b"x"
    with pytest.raises(TimeoutError):
        other.wait(["absent"])
    tally = host.tally
    assert tally.connections == 3 and tally.ops["add"] == 2 and tally.ops["wait"] == 1
    assert tally.rank_ops == {0: 3, 1: 4}
