"""Inference: chat with a fine-tuned model, batch generation, and base-vs-tuned validation.

Importing this package does not import torch (the TUI builds configs with it); the model itself is
``engine.inference.chat_model.ChatModel``.
"""

from engine.inference.config import (ADAPTER_METHODS, InferConfig, check_infer_config, load_infer_config,
                                     make_infer_config)

__all__ = ["ADAPTER_METHODS", "InferConfig", "check_infer_config", "load_infer_config", "make_infer_config"]
