"""Keyword-only service functions shared by the HTTP API and the CLI.

Each takes a SQLAlchemy session (the caller owns the transaction) and raises
the errors in ``services.errors`` for bad input, so routes and commands only
translate them (404/409/422, or a message and exit code).
"""
