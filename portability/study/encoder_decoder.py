"""A tiny T5 exported in Hugging Face Optimum's encoder-decoder layout, for ``check --generate --encoder``.

Built from its ``transformers`` configuration offline (random weights drawn with seed 0; ``portability setup
transformers``), exported with torch.onnx (TorchScript exporter, opset 17) under Optimum's names, as
``study/transformers.py`` builds its zoo (cached by a digest of the program):

- ``encoder_model.onnx``: ``input_ids``, ``attention_mask`` -> ``last_hidden_state``;
- ``decoder_model.onnx``: ``input_ids`` (the decoder's tokens), ``encoder_attention_mask``,
  ``encoder_hidden_states``, ``past_key_values.N.decoder.key/value`` and ``past_key_values.N.encoder.key/value``
  -> ``logits``, ``present.N.decoder.key/value``, ``present.N.encoder.key/value``: one file that prefills from an
  empty past. The cross-attention keys and values are recomputed from ``encoder_hidden_states`` at every step
  (the encoder past is an input, as in Optimum's merged decoder, but the graph only adds ``0 * sum(past)`` of
  it): the export needs no branch on the cache;
- ``config.json`` (``decoder_start_token_id``: 0, T5's pad id) and ``decoder_model.json`` (the prompt and the
  tokens ``transformers``' own ``generate`` gives for it: what the ONNX reference should equal).

The weights of every matrix are drawn with standard deviation 0.1: ``transformers``' T5 initialization leaves
a tiny random model's logits flat (it generated token 0 only).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

SETTINGS = dict(vocab_size=128, d_model=48, d_kv=24, d_ff=96, num_layers=2, num_decoder_layers=2, num_heads=2,
                relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                tie_word_embeddings=False)
PROMPT = (109, 81, 65, 35, 7)
TORCH_TOKENS = 16
STD = 0.1

BUILD = r'''
import json, os, sys, torch, transformers
spec = json.loads(sys.argv[1]); out = sys.argv[2]; folder = os.path.dirname(out)
torch.manual_seed(0)
cfg = transformers.T5Config(**spec["settings"])
model = transformers.T5ForConditionalGeneration(cfg).eval()
with torch.no_grad():  # transformers' init leaves a tiny random model's logits flat: one token repeated
    for p in model.parameters():
        if p.dim() > 1:
            p.normal_(0, spec["std"])
L, H, D = cfg.num_decoder_layers, cfg.num_heads, cfg.d_kv

class Encoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, input_ids, attention_mask):
        return self.m.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

class Decoder(torch.nn.Module):  # one file, an empty past at the first step; cross K/V recomputed each step
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, input_ids, encoder_attention_mask, encoder_hidden_states, *past):
        own = transformers.DynamicCache([(past[i], past[i + 1]) for i in range(0, 4 * L, 4)], config=cfg)
        cache = transformers.EncoderDecoderCache(own, transformers.DynamicCache(config=cfg))
        o = self.m(decoder_input_ids=input_ids, attention_mask=encoder_attention_mask,
                   encoder_outputs=(encoder_hidden_states,), past_key_values=cache, use_cache=True)
        c = o.past_key_values
        pres = []
        for i in range(L):
            s, x = c.self_attention_cache.layers[i], c.cross_attention_cache.layers[i]
            pres += [s.keys, s.values, x.keys + 0 * past[4 * i + 2].sum(), x.values + 0 * past[4 * i + 3].sum()]
        return (o.logits, *pres)

kinds = [("decoder", "key"), ("decoder", "value"), ("encoder", "key"), ("encoder", "value")]
pins = [f"past_key_values.{i}.{a}.{k}" for i in range(L) for a, k in kinds]
pouts = [f"present.{i}.{a}.{k}" for i in range(L) for a, k in kinds]
ins = ["input_ids", "encoder_attention_mask", "encoder_hidden_states"] + pins
outs = ["logits"] + pouts
enc_seq, past_len, seq = 7, 5, 3
axes = {"input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
        "encoder_attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
        "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"},
        "logits": {0: "batch_size", 1: "decoder_sequence_length"}}
for n in pins:
    axes[n] = {0: "batch_size", 2: "past_decoder_sequence_length" if ".decoder." in n else "encoder_sequence_length_out"}
for n in pouts:
    axes[n] = {0: "batch_size", 2: "past_decoder_sequence_length + 1" if ".decoder." in n else "encoder_sequence_length"}
ex_past = []
for i in range(L):
    ex_past += [torch.rand(1, H, past_len, D), torch.rand(1, H, past_len, D), torch.rand(1, H, enc_seq, D), torch.rand(1, H, enc_seq, D)]
ex = (torch.randint(0, cfg.vocab_size, (1, seq)), torch.ones(1, enc_seq, dtype=torch.int64), torch.rand(1, enc_seq, cfg.d_model), *ex_past)
with torch.no_grad():
    torch.onnx.export(Encoder(model).eval(), (torch.randint(0, cfg.vocab_size, (1, enc_seq)), torch.ones(1, enc_seq, dtype=torch.int64)),
                      os.path.join(folder, "encoder_model.onnx"), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch_size", 1: "encoder_sequence_length"},
                                    "attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
                                    "last_hidden_state": {0: "batch_size", 1: "encoder_sequence_length"}})
    torch.onnx.export(Decoder(model).eval(), ex, out + ".onnx", input_names=ins, output_names=outs, opset_version=17,
                      dynamo=False, dynamic_axes=axes)
    src = torch.tensor([spec["prompt"]])
    gen = model.generate(input_ids=src, attention_mask=torch.ones_like(src), max_new_tokens=spec["torch_tokens"],
                         min_new_tokens=spec["torch_tokens"], do_sample=False, num_beams=1, eos_token_id=None)
json.dump({"decoder_start_token_id": cfg.decoder_start_token_id, "model_type": "t5"}, open(os.path.join(folder, "config.json"), "w"))
json.dump({"prompt": spec["prompt"], "torch_tokens": [int(t) for t in gen[0, 1:]], "decoder_start_token_id": cfg.decoder_start_token_id,
           "layers": L, "heads": H, "head_dim": D, "d_model": cfg.d_model, "vocab": cfg.vocab_size}, open(out + ".json", "w"))
'''


def build(root: Path, log: Callable[[str], None] = lambda s: None) -> Path:
    """The folder holding ``encoder_model.onnx``, ``decoder_model.onnx``, ``config.json`` and
    ``decoder_model.json`` (built unless cached under ``root``)."""
    from portability.study.transformers import built

    spec = {"settings": SETTINGS, "prompt": list(PROMPT), "torch_tokens": TORCH_TOKENS, "std": STD}
    return built("decoder_model", spec, BUILD, root, log)
