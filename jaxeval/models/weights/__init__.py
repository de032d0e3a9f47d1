"""Checkpoint readers by Hugging Face tensor name: safetensors (`checkpoint`), Hugging Face's
names and layouts (`hf`), GGUF files (`gguf_file` parses, `gguf` maps and dequantizes,
`gguf_tokenizer` builds the tokenizer) and the MXFP4 expert format (`mxfp4`); `bounds` holds the
sizes a config or GGUF header declares to caps and to the tensors present. The loader
(`jaxeval.models.loader`) reads through them."""
