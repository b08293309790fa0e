"""Tiny causal language models' decoders built here with onnx.helper, in Hugging Face Optimum's layout:
``input_ids``, ``attention_mask`` (past + sequence), ``position_ids``, ``past_key_values.N.key/value``
(``[batch, heads, past, head dim]``) in; ``logits`` and ``present.N.key/value`` out, with Optimum's names of
the dynamic dimensions. One attention layer per block (learned position embedding, the mask as an additive
bias), seeded weights: small, but it reads its past and its mask as a real decoder does."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, HEADS, MAX_POS = 50, 8, 2, 256
HEAD_DIM = HIDDEN // HEADS
PAST_DIM = "past_sequence_length"
TOTAL_DIM = "past_sequence_length + sequence_length"


def decoder(path: Path, layers: int = 2, seed: int = 0, with_past: bool = True) -> Path:
    """``decoder_with_past_model.onnx`` (``with_past``), else ``decoder_model.onnx`` (presents out only)."""
    rng = np.random.default_rng(seed)
    w = lambda name, *shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)
    inits = [w("tok_emb", VOCAB, HIDDEN), w("pos_emb", MAX_POS, HIDDEN), w("w_out", HIDDEN, VOCAB),
             numpy_helper.from_array(np.array([0, 0, HEADS, HEAD_DIM], np.int64), "split_heads"),
             numpy_helper.from_array(np.array([0, 0, HIDDEN], np.int64), "merge_heads"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "neg"),
             numpy_helper.from_array(np.array(1 / np.sqrt(HEAD_DIM), np.float32), "scale"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "mask_axes")]
    total = TOTAL_DIM if with_past else "sequence_length"
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", total]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", VOCAB])]
    nodes = [helper.make_node("Gather", ["tok_emb", "input_ids"], ["tok"]),
             helper.make_node("Gather", ["pos_emb", "position_ids"], ["pos"]),
             helper.make_node("Add", ["tok", "pos"], ["h0"]),
             helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "mask_f"], ["mask_inv"]),
             helper.make_node("Mul", ["mask_inv", "neg"], ["mask_bias2"]),
             helper.make_node("Unsqueeze", ["mask_bias2", "mask_axes"], ["mask_bias"])]
    h = "h0"
    for i in range(layers):
        inits += [w(f"wq{i}", HIDDEN, HIDDEN), w(f"wk{i}", HIDDEN, HIDDEN), w(f"wv{i}", HIDDEN, HIDDEN)]
        for x in ("q", "k", "v"):
            nodes += [helper.make_node("MatMul", [h, f"w{x}{i}"], [f"{x}{i}_flat"]),
                      helper.make_node("Reshape", [f"{x}{i}_flat", "split_heads"], [f"{x}{i}_bshd"]),
                      helper.make_node("Transpose", [f"{x}{i}_bshd"], [f"{x}{i}_new"], perm=[0, 2, 1, 3])]
        for x, name in (("k", "key"), ("v", "value")):
            present = f"present.{i}.{name}"
            outputs.append(helper.make_tensor_value_info(present, TensorProto.FLOAT, ["batch_size", HEADS, total, HEAD_DIM]))
            if with_past:
                past = f"past_key_values.{i}.{name}"
                inputs.append(helper.make_tensor_value_info(past, TensorProto.FLOAT, ["batch_size", HEADS, PAST_DIM, HEAD_DIM]))
                nodes.append(helper.make_node("Concat", [past, f"{x}{i}_new"], [present], axis=2))
            else:
                nodes.append(helper.make_node("Identity", [f"{x}{i}_new"], [present]))
        nodes += [helper.make_node("Transpose", [f"present.{i}.key"], [f"kt{i}"], perm=[0, 1, 3, 2]),
                  helper.make_node("MatMul", [f"q{i}_new", f"kt{i}"], [f"s{i}_raw"]),
                  helper.make_node("Mul", [f"s{i}_raw", "scale"], [f"s{i}_scaled"]),
                  helper.make_node("Add", [f"s{i}_scaled", "mask_bias"], [f"s{i}"]),
                  helper.make_node("Softmax", [f"s{i}"], [f"p{i}"], axis=-1),
                  helper.make_node("MatMul", [f"p{i}", f"present.{i}.value"], [f"c{i}_bhsd"]),
                  helper.make_node("Transpose", [f"c{i}_bhsd"], [f"c{i}_bshd"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [f"c{i}_bshd", "merge_heads"], [f"c{i}"]),
                  helper.make_node("Add", [h, f"c{i}"], [f"h{i + 1}"])]
        h = f"h{i + 1}"
    nodes.append(helper.make_node("MatMul", [h, "w_out"], ["logits"]))
    graph = helper.make_graph(nodes, "tiny_decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="portability-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def torch_decoder_module(seed: int = 0) -> tuple:
    """The same kind of decoder written in PyTorch, with what ``torch.export`` needs (the module, example
    inputs, its sequence and past lengths dynamic): ``input_ids``, ``past_key_values_0_key/value`` (a program's
    inputs are its arguments' names) in; a dict of ``logits``, ``present.0.key/value`` out. No mask and no
    positions come in: the position offset is read from the past's length, ``past.shape[2]``, as decoders do —
    a Python int while tracing, which a tracer that runs the program at fixed shapes freezes into the graph."""
    import torch

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            p = lambda *shape: torch.nn.Parameter(torch.randn(*shape, generator=g))
            self.tok, self.pos, self.out = p(VOCAB, HIDDEN), p(MAX_POS, HIDDEN), p(HIDDEN, VOCAB)
            self.wq, self.wk, self.wv = p(HIDDEN, HIDDEN), p(HIDDEN, HIDDEN), p(HIDDEN, HIDDEN)

        def forward(self, input_ids, past_key_values_0_key, past_key_values_0_value):
            past = past_key_values_0_key.shape[2]
            positions = torch.ones_like(input_ids).cumsum(-1) - 1 + past  # past .. past + sequence - 1
            h = self.tok[input_ids] + self.pos[positions]
            heads = lambda x: x.reshape(x.shape[0], -1, HEADS, HEAD_DIM).transpose(1, 2)
            q = heads(h @ self.wq)
            k = torch.cat([past_key_values_0_key, heads(h @ self.wk)], 2)
            v = torch.cat([past_key_values_0_value, heads(h @ self.wv)], 2)
            key_positions = torch.ones_like(k[0, 0, :, 0], dtype=torch.long).cumsum(0) - 1
            causal = key_positions[None, None, None, :] <= positions[:, None, :, None]
            scores = (q @ k.transpose(-1, -2) / HEAD_DIM ** 0.5).masked_fill(~causal, -1e4)
            c = (scores.softmax(-1) @ v).transpose(1, 2).reshape(h.shape[0], -1, HIDDEN)
            return {"logits": (h + c) @ self.out, "present.0.key": k, "present.0.value": v}

    ids, past = torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, HEADS, 2, HEAD_DIM)
    seq, length = torch.export.Dim("sequence_length", max=64), torch.export.Dim("past_sequence_length", max=128)
    dims = {"input_ids": {1: seq}, "past_key_values_0_key": {2: length}, "past_key_values_0_value": {2: length}}
    return Decoder().eval(), (ids, past, past.clone()), dims


def torch_decoder(path: Path, seed: int = 0) -> Path:
    """``torch_decoder_module`` exported by ``torch.export`` and saved as a program (``.pt2``)."""
    import torch

    module, example, dims = torch_decoder_module(seed)
    torch.export.save(torch.export.export(module, example, dynamic_shapes=dims), str(path))
    return path
