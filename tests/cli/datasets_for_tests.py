"""User dataset factories for the CLI tests ('tests.cli.datasets_for_tests:...')."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def bad_labels(split: str) -> TensorDataset:
    """Fashion-shaped images whose labels reach 12 with num_classes = 10."""
    images = torch.rand(64, 1, 28, 28)
    labels = torch.arange(64) % 13
    return TensorDataset(images, labels)


def flat_vectors(split: str) -> TensorDataset:
    """784-long vectors, not images: nothing to crop or flip."""
    return TensorDataset(torch.rand(64, 784), torch.arange(64) % 10)
