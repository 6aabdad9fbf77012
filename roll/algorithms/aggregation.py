"""Placeholder: being written (see docs/contracts.md)."""
__all__ = []
