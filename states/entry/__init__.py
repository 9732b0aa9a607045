"""Each state's entry work against real megatron-core: one module per state (`enter`, `release`)."""
