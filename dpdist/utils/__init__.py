"""Shared helpers: parameter validation and random number generation."""
