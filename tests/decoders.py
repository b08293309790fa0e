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
