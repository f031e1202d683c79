"""The span detector: latency per evaluation, how its windows combine, whether it wants its own process."""
