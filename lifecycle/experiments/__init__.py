"""Experiments that reproduce, from real runs on CPU ranks, why a lifecycle rule matters."""
