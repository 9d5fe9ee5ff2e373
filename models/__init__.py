"""Workloads (the model zoo, lowered to training ops) and the training surrogate (numpy)."""
