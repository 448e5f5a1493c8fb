"""pftp-agent: reports a mirror's utilization to its P-FTP coordinator (paper 004, 3.2.1)."""

__version__ = "0.1.0"
