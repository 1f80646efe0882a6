"""What the gateway knows of the local model: its tokenizer (:mod:`.hf_tokenizer`), the prompt's
token ids for cache-aware replica choice (:mod:`.prompt_tokens`), and vLLM's KV cache events
(:mod:`.kv_events`)."""
