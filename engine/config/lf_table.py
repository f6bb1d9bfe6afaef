"""Every LLaMA-Factory key that is not an lf-assistant field, grouped by feature (see ``engine.config.lf_keys``).

Sources: LLaMA-Factory's hparams (model, data, finetuning, generating, training, evaluation and Megatron-Bridge
arguments), the Transformers TrainingArguments fields LLaMA-Factory YAMLs carry (including 4.x spellings), and the
v1 config keys. Each ``refused`` group gives LLaMA-Factory's default per key: that value is accepted (it means the
feature is off). To support a feature, make its keys fields of the config and delete them here.
"""

from __future__ import annotations

from engine.config.lf_keys import ALL, EXPORT, INFER, TRAIN, Rule, refused, refused_always, unused

TRAIN_INFER = frozenset({TRAIN, INFER})
_LOW_MEMORY = "use finetuning_type: lora (or freeze) for low-memory training"
_ADAMW = "use optim: adamw_torch, adafactor, sgd, ... (Transformers' optimizers)"
_MULTI_GPU = "use fsdp: full_shard, deepspeed: FILE or cp_size for several GPUs"
_PREDICT = "use `lf-assistant chat INFER.yaml --prompts FILE --out OUT.jsonl` to generate answers for a prompt list"
_V1 = "LLaMA-Factory v1's config format"

LF_KEYS: dict[str, Rule] = {
    # --- optimizers and methods lf-assistant does not implement
    **refused("LLaMA-Factory's GaLore optimizer", _LOW_MEMORY, use_galore=False, galore_target="all",
              galore_rank=16, galore_update_interval=200, galore_scale=2.0, galore_proj_type="std",
              galore_layerwise=False),
    **refused("LLaMA-Factory's APOLLO optimizer", _LOW_MEMORY, use_apollo=False, apollo_target="all",
              apollo_rank=16, apollo_update_interval=200, apollo_scale=32.0, apollo_proj="random",
              apollo_proj_type="std", apollo_scale_type="channel", apollo_layerwise=False, apollo_scale_front=False),
    **refused("LLaMA-Factory's BAdam optimizer", _LOW_MEMORY, use_badam=False, badam_mode="layer",
              badam_start_block=None, badam_switch_mode="ascending", badam_switch_interval=50,
              badam_update_ratio=0.05, badam_mask_mode="adjacent", badam_verbose=0),
    **refused("Transformers' GaLore/APOLLO optimizer targets", _ADAMW, optim_target_modules=None),
    **refused("dropping an epoch's last incomplete batch", "every sample trains here; remove the key",
              dataloader_drop_last=False),
    **refused("LLaMA-Factory's Adam-mini optimizer", _ADAMW, use_adam_mini=False),
    **refused("LLaMA-Factory's Muon optimizer", _ADAMW, use_muon=False),
    **refused("the legacy Adafactor switch", "use optim: adafactor", adafactor=False),
    **refused("LLaMA-Factory's DFT loss", "lf-assistant's SFT loss is the token cross-entropy", use_dft_loss=False),
    **refused("LLaMA-Factory's ASFT loss", "lf-assistant's SFT loss is the token cross-entropy",
              use_asft_loss=False, asft_alpha=0.1),
    **refused("LLaMA-Factory's EAFT loss", "lf-assistant's SFT loss is the token cross-entropy",
              use_eaft_loss=False, eaft_alpha=1.0),
    **refused("LLaMA-Factory's FP8 training", "use bf16: true", fp8=False, fp8_backend="auto",
              fp8_enable_fsdp_float8_all_gather=False),
    **refused("LLaMA-Factory's pure bf16 training (no fp32 master weights)", "use bf16: true", pure_bf16=False),
    **refused("LLaMA-Factory's OFT method", "use finetuning_type: lora", module_dropout=0.0, oft_rank=0,
              oft_block_size=32, oft_target="all"),
    **refused("LLaMA-Factory's LLaMA-Pro block expansion", "use finetuning_type: freeze", use_llama_pro=False),
    **refused("LLaMA-Factory's mixture-of-depths (MoD) conversion", None, scope=ALL, mixture_of_depths=None),
    # --- stages and preference training
    **refused("LLaMA-Factory's PPO (RLHF with a reward model)", "use stage: dpo or kto", ppo_buffer_size=1,
              ppo_epochs=4, ppo_score_norm=False, ppo_target=6.0, ppo_whiten_rewards=False, reward_model=None,
              reward_model_adapters=None, reward_model_quantization_bit=None, reward_model_type="lora"),
    **refused("a separate DPO/KTO reference model",
              "lf-assistant uses the frozen starting model as the reference (LLaMA-Factory's default)",
              ref_model=None, ref_model_adapters=None, ref_model_quantization_bit=None),
    **refused("LLaMA-Factory's BCO term for DPO", "use pref_loss: sigmoid", pref_bco_weight=0.0),
    **refused("LLaMA-Factory's LD-DPO length weighting", "use pref_loss: sigmoid", ld_alpha=None),
    **refused("LLaMA-Factory's prediction run (answers generated for a test set)", _PREDICT, do_predict=False,
              predict_with_generate=False),
    **refused_always("LLaMA-Factory's benchmark evaluation (llamafactory-cli eval: MMLU, C-Eval, CMMLU)", None,
                     "task", "task_dir", "batch_size", "lang", "n_shot", "save_dir", "download_mode"),
    # --- several devices
    **refused("LLaMA-Factory's Megatron-Core training (mcore_adapter, Megatron-Bridge)", _MULTI_GPU,
              use_mca=False, use_megatron_bridge=False, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
              expert_model_parallel_size=1, virtual_pipeline_model_parallel_size=None, sequence_parallel=False,
              recompute_granularity=None, recompute_method=None, recompute_num_layers=None,
              account_for_embedding_in_pipeline_split=None, account_for_loss_in_pipeline_split=None,
              bias_activation_fusion=None, apply_rope_fusion=None, masked_softmax_fusion=None,
              cross_entropy_loss_fusion=None, moe_grouped_gemm=None, moe_token_dispatcher_type=None,
              calculate_per_token_loss=None, use_distributed_optimizer=True, overlap_param_gather=True,
              overlap_grad_reduce=True, use_packed_sequences=False, mixed_precision="bf16_mixed",
              megatron_pretrained_checkpoint=None, export_hf_on_finish=False, extra_config=None),
    **refused("LLaMA-Factory's HyperParallel backend", _MULTI_GPU, use_hyper_parallel=False,
              hyper_parallel_args=None, hyper_parallel_cp_size=1),
    **refused("LLaMA-Factory's Ray launcher", "use `lf-assistant launch` (torchrun) for several processes or nodes",
              ray_num_workers=1, ray_init_kwargs=None),
    **refused("a hand-set process-group address", "`lf-assistant launch CONFIG --print` writes the torchrun commands "
              "with the address", master_addr=None, master_port=None),
    **refused("Accelerate's batch dispatch settings", None, accelerator_config=None, parallelism_config=None,
              split_batches=False, dispatch_batches=None),
    **refused("forcing the CPU from the config", "hide the GPUs with CUDA_VISIBLE_DEVICES= or choose CPU in the GPU "
              "choice", use_cpu=False, no_cuda=False),
    **refused("KTransformers (CPU/GPU hybrid MoE)", None, scope=ALL, use_kt=False, kt_cpu_activation=None,
              kt_weight_path=None, kt_non_expert_weight_path=None, kt_expert_checkpoint_path=None,
              kt_use_lora_experts=None, kt_lora_expert_num=None, kt_lora_expert_intermediate_size=None,
              kt_config=None),
    # --- model, tokenizer and quantization
    **refused("LLaMA-Factory's multimodal (image, video, audio) training", "lf-assistant trains text-only models",
              scope=ALL, media_dir=None, image_max_pixels=768 * 768, image_min_pixels=32 * 32,
              image_do_pan_and_scan=False, crop_to_patches=False, video_max_pixels=256 * 256,
              video_min_pixels=16 * 16, video_fps=2.0, video_maxlen=128, use_audio_in_video=False,
              audio_sampling_rate=16000, freeze_vision_tower=True, freeze_multi_modal_projector=True,
              freeze_language_model=False),
    **refused("LLaMA-Factory's new tokens (added to the tokenizer and the embeddings)",
              "resize_vocab: true grows the embeddings to an already larger tokenizer", scope=ALL,
              add_tokens=None, add_special_tokens=None, new_special_tokens=None, new_special_tokens_config=None,
              init_special_tokens="noise_init"),
    # LF's tokenizer option: true keeps text that spells a control token as text, which is the default here
    **refused("LLaMA-Factory's split_special_tokens tokenizer option", "text that spells a control token already "
              "stays text here (allow_special_tokens_in_text: false, the default): remove the key", scope=ALL,
              split_special_tokens=False),
    **refused("resized embeddings outside training", "a full fine-tune saves its resized embeddings; an adapter "
              "trained with resize_vocab carries them (additional_target)", scope=frozenset({INFER, EXPORT}),
              resize_vocab=False),
    **refused("LLaMA-Factory's RoPE scaling at inference (a doubled context)", "a full fine-tune trained with "
              "rope_scaling keeps it in its config.json", scope=frozenset({INFER, EXPORT}), rope_scaling=None),
    **refused("LongLoRA's shifted sparse attention (S2-Attn)", None, shift_attn=False),
    # ALL: LLaMA-Factory's loader applies it for chat and export too (random weights answering)
    **refused("training from random weights", "lf-assistant fine-tunes the weights in model_name_or_path",
              scope=ALL, train_from_scratch=False),
    # a chat or export config's quantization_bit loads through bitsandbytes here; LF picks HQQ or EETQ by this key
    **refused("LLaMA-Factory's on-the-fly HQQ and EETQ quantization", "quantization_bit loads through bitsandbytes "
              "(quantization_method: bnb)", scope=frozenset({INFER, EXPORT}), quantization_method="bnb"),
    **refused("a hand-set MoE router loss coefficient", "the model's own config value is used",
              moe_aux_loss_coef=None),
    **refused("LLaMA-Factory's fp32 upcasting of layer norms and the head output", None, upcast_layernorm=False,
              upcast_lmhead_output=False),
    **refused("LLaMA-Factory's adapter_folder", "give the adapter's own folder in adapter_name_or_path",
              scope=ALL, adapter_folder=None),
    **refused("fp4 or single quantization at inference", "chat loads 4-bit bases as nf4 with double "
              "quantization, LLaMA-Factory's default", scope=frozenset({INFER}), quantization_type="nf4",
              double_quantization=True),
    **refused("a hub revision other than main outside training", "download that revision into a folder and give "
              "its path", scope=frozenset({INFER, EXPORT}), model_revision="main"),
    # --- data and templates
    **refused("LLaMA-Factory's dataset streaming (rows read lazily while training)", "datasets are read into "
              "memory: remove streaming (use max_samples to cap the rows, tokenized_path to tokenize once)",
              streaming=False),
    **refused("training on padding tokens", None, ignore_pad_token_for_loss=True),
    **refused("training without shuffling", None, disable_shuffling=False),
    **refused("a data-order seed apart from seed", "seed sets the data order too", data_seed=None),
    **refused("Transformers' ordered or length-grouped sampling", None, train_sampling_strategy="random",
              group_by_length=False, sortish_sampler=False),
    **refused("a separate eval loss per dataset", "one eval loss over all eval data is reported",
              eval_on_each_dataset=False),
    **refused("token accuracy at evaluation", "the eval loss is reported", compute_accuracy=False),
    # --- the training loop
    **refused("early stopping", "set max_steps, or keep the checkpoint with the best eval loss",
              early_stopping_steps=None, load_best_model_at_end=False, metric_for_best_model=None,
              greater_is_better=None),
    **refused("label smoothing", None, label_smoothing_factor=0.0),
    **refused("NEFTune embedding noise", None, neftune_noise_alpha=None),
    **refused("automatic batch size search", "set per_device_train_batch_size", auto_find_batch_size=False),
    **refused("per-device loss averaging", "the loss is averaged over every trained token of the step",
              average_tokens_across_devices=True),
    **refused("resuming without skipping the data already seen", None, ignore_data_skip=False),
    **refused("the legacy per-GPU batch size keys", "use per_device_train_batch_size and "
              "per_device_eval_batch_size", per_gpu_train_batch_size=None, per_gpu_eval_batch_size=None),
    **refused("uploading to the Hub during training", "upload output_dir afterwards with `hf upload`",
              push_to_hub=False),
    **refused("LLaMA-Factory's torch profiler", None, enable_torch_profiler=False),
    **refused("LLaMA-Factory's use_swanlab switch", "use report_to: swanlab", use_swanlab=False),
    # --- inference and export
    **refused("extra vLLM engine arguments", None, scope=frozenset({INFER}), vllm_config=None),
    **refused("extra SGLang engine arguments", None, scope=frozenset({INFER}), sglang_config=None,
              sglang_tp_size=-1),
    **refused("LLaMA-Factory's GPTQ export quantization", "export in full precision, then quantize with the "
              "runtime's tool (llama.cpp, AutoGPTQ, ...)", scope=frozenset({EXPORT}),
              export_quantization_dataset=None, export_quantization_nsamples=128, export_quantization_maxlen=1024),
    # --- LLaMA-Factory v1 keys
    **refused_always(_V1, "use model_name_or_path", "model"),
    **refused_always(_V1, None, "model_class", "save_ckpt_as_hf", "dist_timeout", "batching_workers"),
    **refused_always(_V1, "use dataset and dataset_dir", "train_dataset"),
    **refused_always(_V1, "use per_device_train_batch_size", "micro_batch_size"),
    **refused_always(_V1, "use per_device_train_batch_size and gradient_accumulation_steps", "global_batch_size"),
    **refused_always(_V1, "use finetuning_type, lora_rank, lora_alpha and lora_target", "peft_config"),
    **refused_always(_V1, "use fsdp: full_shard or deepspeed: FILE", "dist_config"),
    **refused_always(_V1, "use nproc_per_node with fsdp", "dp_size", "mp_replicate_size", "mp_shard_size"),
    **refused_always(_V1, "use quantization_bit", "quant_config", "init_config"),
    **refused_always(_V1, "use optim, learning_rate and weight_decay", "optim_config"),
    **refused_always(_V1, "use lr_scheduler_type", "lr_scheduler_config"),
    **refused_always(_V1, "use gradient_checkpointing", "enable_activation_checkpointing"),
    **refused_always(_V1, "use save_steps", "save_epochs"),
    **refused_always(_V1, "use template", "custom_chat_template"),
    **refused_always(_V1, "use `lf-assistant chat`", "sample_backend"),
    **refused("LLaMA-Factory v1's context-parallel modes other than Ulysses", None, cp_mode="ulysses"),
    # --- accepted, named once as not used: they change nothing that is trained or generated
    **unused("data preparation workers and caches", "overwrite_cache", "data_shared_file_system", "buffer_size",
             "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
             "dataloader_prefetch_factor", "dataloader_multiprocessing_context", "dataloader_in_order",
             "remove_unused_columns", "label_names", "length_column_name"),
    **unused("logging, progress display and profiling details", "logging_strategy", "logging_first_step",
             "log_on_each_node", "logging_nan_inf_filter", "include_num_input_tokens_seen", "log_level",
             "log_level_replica", "disable_tqdm", "run_name", "project", "trackio_space_id", "trackio_bucket_id",
             "trackio_static_space_id", "include_effective_tokens_per_second", "include_tokens_per_second",
             "logging_dir", "print_param_status", "skip_memory_metrics", "debug", "swanlab_project",
             "swanlab_workspace", "swanlab_run_name", "swanlab_mode", "swanlab_api_key", "swanlab_logdir",
             "swanlab_lark_webhook_url", "swanlab_lark_secret", "profiler_output_dir", "profiler_wait_steps",
             "profiler_warmup_steps", "profiler_active_steps", "profiler_repeat", "profiler_record_shapes",
             "profiler_profile_memory", "profiler_with_stack", "profile_modules", "tpu_metrics_debug"),
    **unused("process and communication settings lf-assistant sets itself", "ddp_find_unused_parameters",
             "ddp_bucket_cap_mb", "ddp_broadcast_buffers", "ddp_static_graph", "ddp_backend", "ddp_timeout",
             "local_rank", "fsdp_config", "fsdp_min_num_params", "fsdp_transformer_layer_cls_to_wrap",
             "save_on_each_node", "tpu_num_cores", "use_mps_device", "mp_parameters", "ray_scope", "xpu_backend"),
    **unused("speed and memory settings that do not change the result (lf-assistant picks attention and kernels "
             "itself; see kernel_config)", "flash_attn", "use_unsloth", "use_unsloth_gc", "enable_liger_kernel",
             "use_liger_kernel", "liger_kernel_config", "use_v1_kernels", "use_reentrant_gc",
             "gradient_checkpointing_kwargs", "activation_checkpointing", "activation_checkpointing_kwargs",
             "torch_compile", "torch_compile_backend", "torch_compile_mode", "torch_empty_cache_steps",
             "low_cpu_mem_usage", "use_cache", "use_kv_cache", "offload_folder", "tf32", "half_precision_backend",
             "enable_jit_checkpoint", "full_determinism", "quantization_device_map", "sglang_lora_backend",
             "use_ipex", "jit_mode_eval", "torchdynamo"),
    **unused("evaluation and prediction details (the eval loss is computed the same way)", "eval_num_beams",
             "eval_delay", "prediction_loss_only", "eval_on_start", "eval_do_concat_batches",
             "eval_use_gather_object", "eval_accumulation_steps", "include_for_metrics", "batch_eval_metrics",
             "bf16_full_eval", "fp16_full_eval", "do_eval", "generation_max_length", "generation_num_beams",
             "generation_config", "max_length", "include_inputs_for_metrics", "past_index",
             "use_legacy_prediction_loop"),
    **unused("Transformers 5 always loads the fast tokenizer (it ignores use_fast), in LLaMA-Factory too",
             "use_fast_tokenizer"),
    **unused("downloads and hub credentials (use `lf-assistant models download` and HF_TOKEN)", "cache_dir",
             "hf_hub_token", "ms_hub_token", "om_hub_token", "hub_token", "hub_private_repo", "hub_model_id",
             "hub_strategy", "hub_always_push", "hub_revision", "push_to_hub_model_id", "push_to_hub_organization",
             "push_to_hub_token"),
    **unused("checkpoint file details (lf-assistant always writes safetensors)", "save_safetensors",
             "restore_callback_states_from_checkpoint"),
}
