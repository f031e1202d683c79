"""What the benchmarks share: result files, tables and machine facts (common), the loopback judge stand-in
(fakejudge), and the accuracy metrics (metrics)."""
