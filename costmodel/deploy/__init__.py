"""Serving as deployed (issue 24): a workload (``workload``), the engine's memory in pages and the
steady state of continuous batching with chunked prefill (``engine``, its step time in
``step``), and the search over aggregated deployments (``search``). Layer: with ``parallel``
(it uses parallel's TP/EP shard and collectives); docs/serving.md."""

#: The search's engine grids when none is given (here, not in ``search``, so that the CLI's option
#: defaults read them without importing numpy: `costmodel analyze` never loads it).
DEFAULT_BATCHES = tuple(2**i for i in range(11))  # 1 .. 1024 sequences in flight per engine
DEFAULT_TOKENS = (8192,)
