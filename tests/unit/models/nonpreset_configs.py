"""Published config.json fields of real models that are not presets, with the figures their publishers give.

Plain data for ``test_nonpreset_counts``; no tests live here. Each config keeps the fields the reader uses
(and the ones that could mislead it: ``sliding_window`` with ``use_sliding_window: false``, ``q_lora_rank:
null``, ``tie_word_embeddings``), copied from the source named above it; nothing is fetched at run time.
``PUBLISHED`` gives each model's published counts exactly as published, and where they were published.
"""

from __future__ import annotations

from typing import Any

_SLIDING_FULL_24 = ["sliding_attention", "full_attention"] * 12

CONFIGS: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-3.2-1B-Instruct config.json (transformers 4.45.0.dev0, hub commit 4e20de36), as vendored
    # verbatim in kevinstephano/thunder_model_blocks hf_llama/llama_config.py. Tied embeddings; head_dim 64.
    "llama-3.2-1b": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "head_dim": 64, "hidden_act": "silu",
        "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 128256,
    },
    # meta-llama/Llama-3.2-3B: the 1B's schema with 28 layers, hidden 3072, 24/8 heads of 128, FFN 8192, tied
    # (silvaxxx1/MyLLM_101 models/LLAMA/Llama3.2/Llama_configs.py; an MLC build config of the model gives
    # head_dim 128 and tie_word_embeddings true).
    "llama-3.2-3b": {
        "architectures": ["LlamaForCausalLM"], "head_dim": 128, "hidden_size": 3072, "intermediate_size": 8192,
        "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 24,
        "num_hidden_layers": 28, "num_key_value_heads": 8, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "vocab_size": 128256,
    },
    # mistralai/Mistral-Nemo-Base-2407 config.json (transformers 4.43.3), vendored verbatim in
    # kevinstephano/thunder_model_blocks thunder_model_blocks/mistral/mistral_config.py. head_dim 128 is not
    # hidden / heads (5120 / 32 = 160).
    "mistral-nemo-12b": {
        "architectures": ["MistralForCausalLM"], "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
        "intermediate_size": 14336, "max_position_embeddings": 128000, "model_type": "mistral",
        "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 131072,
    },
    # Qwen/Qwen2.5-7B-Instruct and Qwen2.5-3B-Instruct config.json shapes (hidden, layers, heads, FFN, vocab,
    # tie) as tabulated from the hub configs in a public notes file next to the hub API's parameter counts. The
    # window fields are not in that table; they are given as the Qwen2.5 configs carry them, a sliding_window
    # that use_sliding_window false leaves unused.
    "qwen2.5-7b": {
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
        "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "sliding_window": 131072, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 152064,
    },
    "qwen2.5-3b": {
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 2048, "intermediate_size": 11008,
        "max_position_embeddings": 32768, "max_window_layers": 70, "model_type": "qwen2", "num_attention_heads": 16,
        "num_hidden_layers": 36, "num_key_value_heads": 2, "sliding_window": 32768, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
    },
    # Qwen/Qwen3-0.6B config.json (transformers 4.51.0), as dumped in a public model-notes file ("# Qwen/Qwen3-0.6B
    # ## model config"). head_dim 128 is twice hidden / heads (1024 / 16 = 64); tied embeddings.
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
        "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
        "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "use_sliding_window": False, "vocab_size": 151936,
    },
    # Qwen/Qwen3-14B shapes as registered, with the hub id, in a public model registry (hidden 5120, FFN 17408, 40
    # layers, 40/8 heads of 128, vocab 151936); untied, as Qwen3 from 8B up ship.
    "qwen3-14b": {
        "architectures": ["Qwen3ForCausalLM"], "head_dim": 128, "hidden_size": 5120, "intermediate_size": 17408,
        "max_position_embeddings": 40960, "model_type": "qwen3", "num_attention_heads": 40, "num_hidden_layers": 40,
        "num_key_value_heads": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 151936,
    },
    # Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 config.json (hub snapshot 003f183a), as quoted in a public
    # deployment report; the FP8 block quantisation keeps norms, routers and lm_head in bf16.
    "qwen3-coder-480b-a35b-fp8": {
        "architectures": ["Qwen3MoeForCausalLM"], "head_dim": 128, "hidden_size": 6144, "intermediate_size": 8192,
        "max_position_embeddings": 262144, "moe_intermediate_size": 2560, "num_attention_heads": 96,
        "num_experts": 160, "num_experts_per_tok": 8, "num_hidden_layers": 62, "num_key_value_heads": 8,
        "quantization_config": {"activation_scheme": "dynamic", "quant_method": "fp8", "weight_block_size": [128, 128]},
        "torch_dtype": "bfloat16", "vocab_size": 151936,
    },
    # openai/gpt-oss-20b config.json, as summarised field by field in EchoCog/gpt-oss-20b
    # docs/gpt-oss-20b-architecture.md (24 layers alternating sliding/full from layer 0, window 128, 32 experts
    # top-4, mxfp4 experts with attention, router, embedding and lm_head kept bf16).
    "gpt-oss-20b": {
        "architectures": ["GptOssForCausalLM"], "attention_bias": True, "experts_per_token": 4, "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880, "layer_types": _SLIDING_FULL_24,
        "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
        "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
        "quantization_config": {
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4",
        },
        "sliding_window": 128, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 201088,
    },
    # moonshotai/Moonlight-16B-A3B(-Instruct) config.json (transformers 4.46.3), as embedded in a public test of
    # an HF-config parser ("moonlight_config_is_parsed_exactly"). DeepSeek-V3 schema with q_lora_rank null,
    # 2 shared experts, one dense layer.
    "moonlight-16b-a3b": {
        "architectures": ["DeepseekV3ForCausalLM"], "first_k_dense_replace": 1, "hidden_act": "silu",
        "hidden_size": 2048, "intermediate_size": 11264, "kv_lora_rank": 512, "max_position_embeddings": 8192,
        "model_type": "deepseek_v3", "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1,
        "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": True, "num_attention_heads": 16,
        "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
        "num_nextn_predict_layers": 0, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "v_head_dim": 128, "vocab_size": 163840,
    },
}

# (model, total, active or None, source): the publisher's figures as published. The comment above each gives the
# count test_nonpreset_counts sums by hand from the config (and shardplan reports), against the published figure.
PUBLISHED: list[tuple[str, float, float | None, str]] = [
    # 1,235,814,400 (+0.47 %: Meta truncates 1.2358 to '1.23')
    ("llama-3.2-1b", 1.23e9, None, "Meta, Llama 3.2 model card (meta-llama/Llama-3.2-1B), table: '1B (1.23B)'"),
    # 3,212,749,824 (+0.09 %)
    ("llama-3.2-3b", 3.21e9, None, "Meta, Llama 3.2 model card (meta-llama/Llama-3.2-3B), table: '3B (3.21B)'"),
    # 12,247,782,400 (+2.1 % of a round '12B'); with head_dim taken as 5120 / 32 = 160 it would be 12.77e9
    ("mistral-nemo-12b", 12e9, None,
     "Mistral AI, Mistral-Nemo-Instruct-2407 model card and 'Mistral NeMo' blog, 2024-07-18: a '12B' model"),
    # 7,615,616,512: exactly the hub's count
    ("qwen2.5-7b", 7_615_616_512, None,
     "huggingface.co/api/models/Qwen/Qwen2.5-7B-Instruct safetensors.parameters.BF16; model card: "
     "'Number of Parameters: 7.61B, Non-Embedding: 6.53B'"),
    # 3,085,938,688: exactly the hub's count (tied: one vocabulary matrix)
    ("qwen2.5-3b", 3_085_938_688, None, "huggingface.co/api/models/Qwen/Qwen2.5-3B-Instruct safetensors.parameters"),
    # 596,042,752 (-0.66 %); non-embedding 440,355,328 against the card's 0.44B
    ("qwen3-0.6b", 0.6e9, None, "Qwen, Qwen/Qwen3-0.6B model card: 'Number of Parameters: 0.6B, Non-Embedding: 0.44B'"),
    # 14,768,296,960 (-0.21 %); non-embedding 13,212,472,320 against the card's 13.2B
    ("qwen3-14b", 14.8e9, None,
     "Qwen, Qwen/Qwen3-14B model card: 'Number of Parameters: 14.8B, Non-Embedding: 13.2B', 40 layers, 40/8 heads"),
    # total 480,154,859,520 (+0.03 %), active 35,474,749,440 (+1.4 % of a round '35B', both vocabulary matrices
    # counted as Qwen does)
    ("qwen3-coder-480b-a35b-fp8", 480e9, 35e9,
     "Qwen, Qwen/Qwen3-Coder-480B-A35B-Instruct model card, 2025-07-22: '480B in total and 35B activated'"),
    # total 20,908,050,240 (-0.01 %), active without the input embedding 3,607,406,400 (-0.07 %)
    ("gpt-oss-20b", 20.91e9, 3.61e9,
     "OpenAI, 'gpt-oss-120b & gpt-oss-20b Model Card', arXiv:2508.10925, table 1: 20.91B total, 3.61B active "
     "(checkpoint 12.8 GiB)"),
    # total 15,960,108,544 (-0.25 %), active 2,914,774,528 with both vocabulary matrices (2,579,230,208 without
    # the input embedding): either rounds to the round '3B'
    ("moonlight-16b-a3b", 16e9, 3e9,
     "Moonshot AI, moonshotai/Moonlight-16B-A3B README, 2025-02: '16B total parameters', '3B activated'"),
]
