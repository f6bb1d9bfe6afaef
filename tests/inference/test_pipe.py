"""The chat screen's model process: both models loaded once, one JSON line in, one out, until stdin ends."""

import io
import json
from pathlib import Path

from engine.inference.config import load_infer_config
from engine.inference.pipe import serve


def test_pipe_answers_each_turn_with_the_tuned_and_the_base_model(demo_model_dir, tmp_path):
    import engine

    out_dir = tmp_path / "adapter"
    config = engine.load_config({"model_name_or_path": str(demo_model_dir), "dataset": "identity",
                                 "dataset_dir": str(Path(__file__).resolve().parents[2] / "data"),
                                 "template": "qwen", "max_steps": 2, "cutoff_len": 64, "output_dir": str(out_dir),
                                 "learning_rate": 1e-2})
    assert engine.train(config, runs_dir=tmp_path / "runs").status().state == "completed"
    infer = load_infer_config({"model_name_or_path": str(demo_model_dir), "adapter_name_or_path": str(out_dir),
                               "template": "qwen", "max_new_tokens": 3, "do_sample": False})
    requests = [json.dumps({"messages": [{"role": "user", "content": "hi"}]}), "not json", json.dumps({"x": 1})]
    out = io.StringIO()
    serve(infer, base=True, completion=False, lines=iter(line + "\n" for line in requests), out=out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies[0] == {"ready": True, "template": "qwen", "base": True}
    assert isinstance(replies[1]["tuned"], str) and isinstance(replies[1]["base"], str)
    assert "error" in replies[2] and "messages" in replies[3]["error"]
