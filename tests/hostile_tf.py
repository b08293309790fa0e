"""Crafted TensorFlow-side models that reach outside their folder when run: each builder writes one into
``folder``, reading ``secret`` and/or writing ``marker`` (both outside it), and returns what its refusal
names (an op, an asset, a layer). Run unvetted on ``server/tf``, each does what it says (the tests prove
it with the marker for the writers)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

SPEC = ([1, 4], "float32")


def _save(module, folder: Path) -> None:
    import tensorflow as tf

    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})


def _module(body):
    """A tf.Module whose serving function is ``body(x) -> y`` on a [1, 4] float input."""
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": body(x)}

    return M()


def print_to_file(folder: Path, secret: Path, marker: Path) -> str:
    import tensorflow as tf

    def body(x):
        with tf.control_dependencies([tf.print(x, output_stream=f"file://{marker}")]):
            return x * 2.0
    _save(_module(body), folder)
    return "PrintV2"


def checkpoint_save(folder: Path, secret: Path, marker: Path) -> str:
    import tensorflow as tf

    def body(x):
        op = tf.raw_ops.SaveV2(prefix=str(marker), tensor_names=["x"], shape_and_slices=[""], tensors=[x])
        with tf.control_dependencies([op]):
            return x * 2.0
    _save(_module(body), folder)
    return "SaveV2"


def text_line_reader(folder: Path, secret: Path, marker: Path) -> str:
    import tensorflow as tf

    def body(x):
        n = tf.data.TextLineDataset(str(secret)).reduce(tf.constant(0.0), lambda a, s: a + tf.cast(tf.strings.length(s), tf.float32))
        return x + n
    _save(_module(body), folder)
    return "TextLineDataset"


def fixed_length_reader(folder: Path, secret: Path, marker: Path) -> str:
    import tensorflow as tf

    def body(x):
        n = tf.data.FixedLengthRecordDataset(str(secret), 1).reduce(tf.constant(0.0), lambda a, s: a + 1.0)
        return x + n
    _save(_module(body), folder)
    return "FixedLengthRecordDataset"


def dataset_writer(folder: Path, secret: Path, marker: Path) -> str:
    import tensorflow as tf

    def body(x):
        ds = tf.data.Dataset.from_tensors(tf.strings.as_string(x[0, 0]))
        op = tf.raw_ops.DatasetToTFRecord(input_dataset=tf.data.experimental.to_variant(ds), filename=str(marker),
                                          compression_type="")
        with tf.control_dependencies([op]):
            return x * 2.0
    _save(_module(body), folder)
    return "DatasetToTFRecord"


def read_write_file(folder: Path, secret: Path, marker: Path) -> str:
    import tensorflow as tf

    def body(x):
        data = tf.io.read_file(str(secret))
        with tf.control_dependencies([tf.io.write_file(str(marker), data)]):
            return x + tf.cast(tf.strings.length(data), tf.float32)
    _save(_module(body), folder)
    return "ReadFile"


def text_table_from_constant_path(folder: Path, secret: Path, marker: Path) -> str:
    import tensorflow as tf

    def body(x):
        t = tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64, shared_name="t")
        init = tf.raw_ops.InitializeTableFromTextFileV2(table_handle=t, filename=tf.constant(str(secret)),
                                                        key_index=-2, value_index=-1)
        with tf.control_dependencies([init]):
            n = tf.raw_ops.LookupTableSizeV2(table_handle=t)
        return x + tf.cast(n, tf.float32)
    _save(_module(body), folder)
    return "InitializeTableFromTextFileV2"


def asset_outside(folder: Path, secret: Path, marker: Path) -> str:
    """A vocabulary table from an asset, whose asset entry is then pointed at a file outside the folder."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    vocab = folder.parent / "vocab-source.txt"
    vocab.write_text("a\nb\n")

    class Tab(tf.Module):
        def __init__(self):
            self.table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
                str(vocab), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER), -1)

        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x + tf.cast(self.table.size(), tf.float32)}

    _save(Tab(), folder)
    pb = folder / "saved_model.pb"
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString(pb.read_bytes())
    rel = Path("..") / ".." / secret.relative_to(folder.parent.parent) if folder.parent.parent in secret.parents \
        else Path(str(secret))
    for mg in sm.meta_graphs:
        for a in mg.asset_file_def:
            a.filename = str(rel)
    pb.write_bytes(sm.SerializeToString())
    return "asset file"


def text_table_from_a_path_behind_identity(folder: Path, secret: Path, marker: Path) -> str:
    import tensorflow as tf

    def body(x):
        t = tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64, shared_name="t2")
        init = tf.raw_ops.InitializeTableFromTextFileV2(table_handle=t, filename=tf.identity(tf.constant(str(secret))),
                                                        key_index=-2, value_index=-1)
        with tf.control_dependencies([init]):
            n = tf.raw_ops.LookupTableSizeV2(table_handle=t)
        return x + tf.cast(n, tf.float32)
    _save(_module(body), folder)
    return "InitializeTableFromTextFileV2"


def tf1_save_in_the_restore(folder: Path, secret: Path, marker: Path) -> str:
    """A TF1 SavedModel whose saver's restore op (which the loader runs) depends on a SaveV2 to ``marker``."""
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    v1 = tf.compat.v1
    with tf.Graph().as_default() as g, v1.Session(graph=g) as sess:
        x = v1.placeholder(tf.float32, [1, 4], name="x")
        w = v1.get_variable("w", [4, 2], initializer=v1.ones_initializer())
        y = tf.matmul(x, w)
        sess.run(v1.global_variables_initializer())
        b = v1.saved_model.Builder(str(folder))
        b.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={
            "serving_default": v1.saved_model.predict_signature_def({"x": x}, {"y": y})})
        b.save()
    pb = folder / "saved_model.pb"
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString(pb.read_bytes())
    gd = sm.meta_graphs[0].graph_def

    def const(name: str, vals: list[str], vector: bool) -> None:
        n = gd.node.add()
        n.name, n.op = name, "Const"
        n.attr["dtype"].type = types_pb2.DT_STRING
        t = n.attr["value"].tensor
        t.dtype = types_pb2.DT_STRING
        if vector:
            t.tensor_shape.dim.add().size = len(vals)
        t.string_val.extend(v.encode() for v in vals)
    const("evil/prefix", [str(marker)], False)
    const("evil/names", ["stolen"], True)
    const("evil/slices", [""], True)
    s = gd.node.add()
    s.name, s.op = "evil/SaveV2", "SaveV2"
    s.input.extend(["evil/prefix", "evil/names", "evil/slices", "w/Read/ReadVariableOp"])
    s.attr["dtypes"].list.type.append(types_pb2.DT_FLOAT)
    for n in gd.node:
        if n.name == sm.meta_graphs[0].saver_def.restore_op_name:
            n.input.append("^evil/SaveV2")
    pb.write_bytes(sm.SerializeToString())
    return "SaveV2"


SAVED_MODELS = {f.__name__: f for f in (print_to_file, checkpoint_save, text_line_reader, fixed_length_reader,
                                        dataset_writer, read_write_file, text_table_from_constant_path,
                                        text_table_from_a_path_behind_identity, tf1_save_in_the_restore,
                                        asset_outside)}


def keras_vocabulary_file(folder: Path, secret: Path, marker: Path) -> str:
    """A .keras file whose StringLookup names its vocabulary by a path outside the archive."""
    import keras

    folder.mkdir(parents=True, exist_ok=True)
    inp = keras.Input((1,), dtype="string")
    model = keras.Model(inp, keras.layers.StringLookup(vocabulary=["a", "b"], name="lookup")(inp))
    path = folder / "model.keras"
    model.save(path)
    _edit_keras(path, lambda cfg: _set_layer(cfg, "lookup", vocabulary=str(secret)))
    return "lookup"


def keras_custom_layer(folder: Path, secret: Path, marker: Path) -> str:
    """A .keras file whose layer is a class of another package (code that deserializing would import)."""
    import keras

    folder.mkdir(parents=True, exist_ok=True)
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(2, name="dense")(inp))
    path = folder / "model.keras"
    model.save(path)

    def edit(cfg):
        for layer in cfg["config"]["layers"]:
            if layer["name"] == "dense":
                layer.update(module="os", class_name="system", registered_name="os>system")
    _edit_keras(path, edit)
    return "os"


def _set_layer(cfg: dict, name: str, **config) -> None:
    for layer in cfg["config"]["layers"]:
        if layer["name"] == name:
            layer["config"].update(config)


def _edit_keras(path: Path, edit) -> None:
    import zipfile

    with zipfile.ZipFile(path) as z:
        parts = {n: z.read(n) for n in z.namelist()}
    cfg = json.loads(parts["config.json"])
    edit(cfg)
    parts["config.json"] = json.dumps(cfg).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, data in parts.items():
            z.writestr(n, data)


def tfjs_unknown_op(folder: Path, fixture: Path) -> str:
    """The fixture TF.js graph model with one node's op renamed to one TF.js does not run."""
    shutil.copytree(fixture, folder)
    doc = json.loads((folder / "model.json").read_text())
    node = next(n for n in doc["modelTopology"]["node"] if n["op"] not in ("Placeholder", "Const"))
    node["op"] = "ReadFile"
    (folder / "model.json").write_text(json.dumps(doc))
    return "ReadFile"
