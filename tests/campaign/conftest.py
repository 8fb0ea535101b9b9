"""The campaign's tests use the store tests' real PostgreSQL server (one per test session)."""

from tests.store.conftest import postgres_server

__all__ = ["postgres_server"]
