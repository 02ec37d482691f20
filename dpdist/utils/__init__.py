"""Shared helpers: parameter validation, random number generation, atomic and owner-only files."""
