"""Chat with a base, LoRA or fully fine-tuned model: one conversation, streamed, or many at once.

    from engine.inference import load_infer_config
    from engine.inference.chat_model import ChatModel
    model = ChatModel(load_infer_config("infer.yaml"))
    model.chat([{"role": "user", "content": "Who are you?"}])
    model.batch_chat([[{"role": "user", "content": q}] for q in questions])

Prompts are token ids built by the training template (the same code that encoded the training data), so what the
model sees at inference is byte-identical to what it learned from. Many prompts are generated in left-padded
batches, longest first, so padding stays small and the model runs once per batch instead of once per prompt.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator

from engine.errors import ConfigError
from engine.inference.config import Generation, InferConfig
from engine.inference.source import ModelPlan, attach_adapter, load_tokenizer_and_template, pick_device, plan_model

Messages = list[dict]
GENERATION_KEYS = ("max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "repetition_penalty",
                   "num_beams", "length_penalty", "skip_special_tokens")


def generation_settings(config: InferConfig, overrides: dict) -> dict:
    """The config's generation keys with per-call overrides; an unknown override name raises."""
    unknown = set(overrides) - set(GENERATION_KEYS)
    if unknown:
        raise ConfigError(f"Unknown generation setting(s) {', '.join(sorted(unknown))}; valid: "
                          f"{', '.join(GENERATION_KEYS)}.")
    settings = {key: getattr(config, key) for key in GENERATION_KEYS}
    settings.update(overrides)
    if settings["temperature"] is not None and settings["temperature"] <= 0:
        settings["do_sample"] = False  # temperature 0 means greedy in every runtime
    return settings


class HFBackend:
    """transformers generate(): works on CPU and GPU, LoRA merged or not."""

    def __init__(self, model, tokenizer, template, device: str) -> None:
        self.model, self.tokenizer, self.template, self.device = model, tokenizer, template, device
        self.stop_ids = template.stop_token_ids(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]

    def _generate_kwargs(self, settings: dict) -> dict:
        kwargs = {"max_new_tokens": settings["max_new_tokens"], "do_sample": settings["do_sample"],
                  "num_beams": settings["num_beams"], "repetition_penalty": settings["repetition_penalty"],
                  "eos_token_id": self.stop_ids, "pad_token_id": self.pad_id}
        if settings["do_sample"]:
            kwargs.update(temperature=settings["temperature"], top_p=settings["top_p"], top_k=settings["top_k"])
        else:
            # The checkpoint's generation_config may carry sampling defaults; greedy must not inherit them.
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if settings["num_beams"] > 1:
            kwargs["length_penalty"] = settings["length_penalty"]
        return kwargs

    def _left_pad(self, prompts: list[list[int]]):
        import torch

        width = max(len(ids) for ids in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids):] = 1
        return input_ids.to(self.device), attention_mask.to(self.device)

    def _answer_ids(self, new_ids: list[int]) -> list[int]:
        """The generated ids up to (not including) the first stop token; padding after it dropped."""
        for index, token in enumerate(new_ids):
            if token in self.stop_ids:
                return new_ids[:index]
        return new_ids

    def generate(self, prompts: list[list[int]], settings: dict, *, batch_size: int,
                 on_batch: Callable[[int], None] | None = None) -> list[Generation]:
        import torch

        # Longest first: rows of similar length share a batch, so little compute goes to padding.
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Generation | None] = [None] * len(prompts)
        kwargs = self._generate_kwargs(settings)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            input_ids, attention_mask = self._left_pad([prompts[i] for i in chunk])
            began = time.perf_counter()
            with torch.inference_mode():
                output = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            elapsed = time.perf_counter() - began
            for row, index in enumerate(chunk):
                new_ids = output[row, input_ids.shape[1]:].tolist()
                answer = self._answer_ids(new_ids)
                text = self.tokenizer.decode(answer, skip_special_tokens=settings["skip_special_tokens"])
                # no stop token: the row ran to max_new_tokens (a row that stopped is padded after its stop token)
                results[index] = Generation(text=text, new_tokens=len(answer), time_s=elapsed / len(chunk),
                                            cut=len(answer) == len(new_ids))
            if on_batch:
                on_batch(len(chunk))
        return results  # type: ignore[return-value]

    def stream(self, prompt: list[int], settings: dict) -> Iterator[str]:
        """Pieces of text as they are generated. Closing the iterator early (Ctrl-C in a chat) stops generation."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True,
                                        skip_special_tokens=settings["skip_special_tokens"])
        stop = threading.Event()

        class StopWhenAsked(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool, device=input_ids.device)

        input_ids, attention_mask = self._left_pad([prompt])
        kwargs = dict(self._generate_kwargs(settings), input_ids=input_ids, attention_mask=attention_mask,
                      streamer=streamer, stopping_criteria=StoppingCriteriaList([StopWhenAsked()]))
        errors: list[BaseException] = []

        def work() -> None:
            try:
                with torch.inference_mode():
                    self.model.generate(**kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
                errors.append(exc)
                streamer.end()

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        try:
            yield from streamer
        finally:
            stop.set()
            thread.join()
        if errors:
            raise errors[0]

    def close(self) -> None:
        self.model = None


def load_hf_backend(plan: ModelPlan, config: InferConfig, tokenizer, template, *,
                    merge_adapters: bool = True) -> HFBackend:
    """Base weights, then each adapter; adapters are merged (same outputs, faster) unless the base is quantized."""
    from engine.models.loading import load_model

    device, _note = pick_device("auto")
    model = load_model(plan.base_model, dtype=config.infer_dtype, device=device,
                       trust_remote_code=config.trust_remote_code, quantization_bit=config.quantization_bit)
    for index, adapter in enumerate(plan.adapters):
        model = attach_adapter(model, adapter, plan.base_model)
        last = index == len(plan.adapters) - 1
        if config.quantization_bit is None and (merge_adapters or not last):
            model = model.merge_and_unload()
    model.eval()
    return HFBackend(model, tokenizer, template, device)


class ChatModel:
    """A loaded model with its training template. ``chat``, ``stream_chat`` and ``batch_chat`` take messages as
    ``[{"role": "user" | "assistant" | "system", "content": str}]``."""

    def __init__(self, config: InferConfig, *, plan: ModelPlan | None = None, merge_adapters: bool = True) -> None:
        from engine.inference.backends import check_backend, load_backend

        self.config = config
        self.plan = plan or plan_model(config.model_name_or_path, config.adapters(), config.template,
                                       finetuning_type=config.finetuning_type)
        check_backend(config.infer_backend)
        self.tokenizer, self.template = load_tokenizer_and_template(self.plan, config=config,
                                                                    trust_remote_code=config.trust_remote_code)
        if config.infer_backend == "huggingface":
            self.backend = load_hf_backend(self.plan, config, self.tokenizer, self.template,
                                           merge_adapters=merge_adapters)
        else:
            self.backend = load_backend(config.infer_backend, self.plan, config, self.tokenizer, self.template)

    @property
    def template_name(self) -> str:
        return self.template.name

    def encode(self, messages: Messages, system: str | None = None) -> list[int]:
        """The prompt token ids, ending with the assistant header, exactly as training rendered prompts."""
        if messages and messages[0].get("role") == "system":  # a prompt file's own system prompt (prompts.py)
            system, messages = system or messages[0]["content"], messages[1:]
        if not messages:
            raise ConfigError("A conversation needs at least one user message.")
        return self.template.encode_prompt(self.tokenizer, messages, system or self.config.default_system)

    def chat(self, messages: Messages, system: str | None = None, **settings) -> str:
        """The answer to one conversation."""
        return self.generate_batch([messages], system=system, batch_size=1, **settings)[0].text

    def stream_chat(self, messages: Messages, system: str | None = None, **settings) -> Iterator[str]:
        """The answer to one conversation, piece by piece as it is generated."""
        resolved = generation_settings(self.config, settings)
        if hasattr(self.backend, "stream"):
            yield from self.backend.stream(self.encode(messages, system), resolved)
        else:
            yield self.chat(messages, system, **settings)

    def batch_chat(self, conversations: list[Messages], *, system: str | None = None, batch_size: int = 16,
                   on_progress: Callable[[int, int], None] | None = None, **settings) -> list[str]:
        """One answer per conversation, in order, generated in left-padded batches."""
        return [g.text for g in self.generate_batch(conversations, system=system, batch_size=batch_size,
                                                    on_progress=on_progress, **settings)]

    def generate_batch(self, conversations: list[Messages], *, system: str | None = None, batch_size: int = 16,
                       on_progress: Callable[[int, int], None] | None = None, **settings) -> list[Generation]:
        """Like batch_chat, with token counts and time per answer."""
        prompts = [self.encode(messages, system) for messages in conversations]
        return self._generate(prompts, batch_size, on_progress, settings)

    def complete_batch(self, texts: list[str], *, batch_size: int = 16,
                       on_progress: Callable[[int, int], None] | None = None, **settings) -> list[Generation]:
        """Continue each text as it is, without the chat template: what a continued pre-training run (stage pt)
        learned. The text is encoded as pre-training encodes it: no special tokens added, and text that spells a
        control token (<|im_end|>) stays text unless allow_special_tokens_in_text."""
        split = not self.config.allow_special_tokens_in_text
        prompts = [self.tokenizer(text, add_special_tokens=False, split_special_tokens=split)["input_ids"]
                   for text in texts]
        if any(not ids for ids in prompts):
            raise ConfigError("A completion prompt needs some text.")
        return self._generate(prompts, batch_size, on_progress, settings)

    def _generate(self, prompts: list[list[int]], batch_size: int,
                  on_progress: Callable[[int, int], None] | None, settings: dict) -> list[Generation]:
        """Generate for token-id prompts in batches, reporting (done, total) after each batch."""
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1 (got {batch_size}).")
        resolved = generation_settings(self.config, settings)
        done = 0

        def on_batch(count: int) -> None:
            nonlocal done
            done += count
            if on_progress:
                on_progress(done, len(prompts))

        return self.backend.generate(prompts, resolved, batch_size=batch_size, on_batch=on_batch)

    def close(self) -> None:
        """Free the weights (and GPU memory) now rather than at garbage collection."""
        self.backend.close()
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass
