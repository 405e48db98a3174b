"""tuitrain: a terminal training monitor that hosts a real PyTorch training run."""

__version__ = "0.1.0"
