"""Option names of the programs a disaggregated launch adds beside the engines' servers (whose options
``engine_options.py`` lists, refreshed from the parsers): read from the engines' sources, the versions
of ``engine_options.py``."""

# SGLang's PD router, ``python -m sglang_router.launch_router`` (sgl-model-gateway CliArgs: pd_disaggregation,
# prefill with its bootstrap port, decode, host, port), as SGLang's own PD tests launch it.
SGLANG_ROUTER_OPTIONS = frozenset({"--pd-disaggregation", "--prefill", "--decode", "--host", "--port"})
# ``trtllm-serve disaggregated`` click options (tensorrt_llm/commands/serve.py, 1.2).
TRTLLM_DISAGG_OPTIONS = frozenset({
    "-c", "--config_file", "-m", "--metadata_server_config_file", "-t", "--server_start_timeout",
    "-r", "--request_timeout", "-l", "--log_level", "--metrics-log-interval",
})
# The LLM API fields a context or generation server's extra options add (llm_args.py CacheTransceiverConfig,
# TorchLlmArgs.disable_overlap_scheduler), and the keys of the disaggregated server's config file
# (tensorrt_llm/serve disagg config parsing; examples/disaggregated/README.md).
TRTLLM_DISAGG_YAML_KEYS = frozenset({
    "disable_overlap_scheduler", "cache_transceiver_config", "cache_transceiver_config.backend",
    "cache_transceiver_config.max_tokens_in_buffer",
})
TRTLLM_DISAGG_SERVER_KEYS = frozenset({
    "hostname", "port", "backend", "context_servers", "context_servers.num_instances", "context_servers.urls",
    "generation_servers", "generation_servers.num_instances", "generation_servers.urls",
})
