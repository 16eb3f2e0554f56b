"""dsv4mini: a PyTorch implementation of the DeepSeek-V4 architecture for training
small models ("dsv4-mini") and checking them against the reference numerics."""

from .config import ConfigError, ModelConfig
from .model import Transformer
from .numerics import Numerics

__all__ = ["ConfigError", "ModelConfig", "Transformer", "Numerics"]
