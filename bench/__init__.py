"""P-FTP benchmarks: `python -m bench.lab_bench [--quick]` (network lab, needs root)."""
