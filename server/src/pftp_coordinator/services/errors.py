"""Errors raised by the services; the API and CLI map them to 404/409/422."""

from __future__ import annotations


class ServiceError(Exception):
    """Base: the message is meant for the admin and is safe to show."""


class NotFound(ServiceError, LookupError):
    pass


class AlreadyExists(ServiceError):
    pass


class InvalidInput(ServiceError, ValueError):
    pass
