"""Checkpoint readers by Hugging Face tensor name: safetensors (`checkpoint`), Hugging Face's
names and layouts (`hf`), GGUF files (`gguf_file` parses, `gguf` maps and dequantizes) and the
MXFP4 expert format (`mxfp4`). The loader (`jaxeval.models.loader`) reads through them."""
