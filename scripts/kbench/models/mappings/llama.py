"""Llama 3: keras-hub Llama3CausalLM (the reference) <-> HF LlamaForCausalLM, plain (generate) or wrapped by peft
(fit). keras-hub's Llama backbone names its weights as its Mistral one does (the layout of keras-hub 0.32's
utils/transformers/convert_llama3.py convert_weights), so the Mistral mapping serves it; lm_head is untied."""
from kbench.models.decoder import PEFT_LORA_TARGETS
from kbench.models.mappings.mistral import DERIVED, mistral as decoder_layout  # noqa: F401 (DERIVED: the same)

MAPPINGS = {("llama", "fit"): decoder_layout("base_model.model.", PEFT_LORA_TARGETS), ("llama", "generate"): decoder_layout()}
