"""Constants of the protocol, importable without pydantic (the client's start-up path)."""

API_PREFIX = "/api/v1"
# UDP port of the coordinator's periodic announcement (paper 004, 3.2.4).
ANNOUNCE_PORT = 7461
