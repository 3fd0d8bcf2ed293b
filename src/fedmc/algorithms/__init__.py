"""Federated algorithms, each one module on the shared engine."""
