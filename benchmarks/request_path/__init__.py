"""What faithtrace costs the app: the decorator's time per call, the worker's throughput and the host's
latency beside it, the CPU of an evaluation in the app's process."""
