"""Serving as deployed (issue 24): a workload (``workload``), the engine's memory in pages and the
steady state of continuous batching with chunked prefill (``engine``, its step time in
``step``), and the search over aggregated deployments (``search``). Layer: with ``parallel``
(it uses parallel's TP/EP shard and collectives); docs/serving.md."""
