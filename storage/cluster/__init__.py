"""Cluster storage: actor files made durable in a shared Postgres (``serve --cluster``)."""

from .driver import PgConnection, PgPool

__all__ = ["PgConnection", "PgPool"]
