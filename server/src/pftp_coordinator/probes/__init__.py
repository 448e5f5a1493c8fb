"""Path probes toward mirrors: RTT/loss, capacity, throughput (paper 004, 3.2.1)."""
