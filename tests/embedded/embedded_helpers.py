"""The tiny Qwen3 architecture the tests in tests/embedded build models of."""

ARCHITECTURE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 128,
}
