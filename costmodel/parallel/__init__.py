"""Beyond one GPU: clusters, collectives, layouts (TP, PP, DP/ZeRO, SP, CP, EP), the training
step they give, the search for the best layout, and decode at scale. See docs/parallel.md."""
