"""Llama-3 flavors: a tiny CPU debug model and the published Llama-3/3.1/3.2 shapes (untied output)."""

from __future__ import annotations

from trainer.models.llama_args import LlamaArgs

# Published shapes: Meta's params.json of Llama-3.1 8B/70B/405B and Llama-3.2 1B. All use
# vocab 128256, rope_theta 500000 and the 3.1 RoPE scaling; the tables cover the 128k context.
LLAMA3_FLAVORS: dict[str, LlamaArgs] = {
    # vocab 512 covers the built-in byte tokenizer (256 bytes + specials).
    "debug": LlamaArgs(
        dim=128, n_layers=4, n_heads=8, n_kv_heads=4, vocab_size=512, multiple_of=64,
        rope_theta=500000.0, max_seq_len=8192,
    ),
    # Llama-3.2 1B shapes (ffn 8192), but with its own output matrix instead of the tied embedding.
    "1B": LlamaArgs(
        dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=128256, multiple_of=256,
        ffn_dim_multiplier=1.5, max_seq_len=131072,
    ),
    "8B": LlamaArgs(
        dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256, multiple_of=1024,
        ffn_dim_multiplier=1.3, max_seq_len=131072,
    ),
    "70B": LlamaArgs(
        dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, vocab_size=128256, multiple_of=4096,
        ffn_dim_multiplier=1.3, max_seq_len=131072,
    ),
    "405B": LlamaArgs(
        dim=16384, n_layers=126, n_heads=128, n_kv_heads=8, vocab_size=128256, multiple_of=4096,
        ffn_dim_multiplier=1.2, max_seq_len=131072,
    ),
}
