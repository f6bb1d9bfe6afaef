"""lf-assistant's embedded training engine, usable on its own::

    import engine
    config = engine.load_config("examples/demo/tiny_lora_sft.yaml", max_steps=20)
    assert not engine.validate(config)
    handle = engine.train(config)            # or detach=True
    print(handle.status()["state"], handle.path)

The engine never imports the assistant, textual or rich; importing it does not import torch.
"""

from engine import runs
from engine.api import (chat, export, load_config, load_infer_config, measure_steps, resume, stop, train, validate,
                        validate_model)
from engine.errors import ConfigError, DataError, DeviceError, EngineError, ModelError

__all__ = ["ConfigError", "DataError", "DeviceError", "EngineError", "ModelError", "chat", "export", "load_config",
           "load_infer_config", "measure_steps", "resume", "runs", "stop", "train", "validate", "validate_model"]
