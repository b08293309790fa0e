"""Hostile TensorFlow-side models (``hostile_tf.py``): a SavedModel that prints to a file, saves a checkpoint,
reads files through datasets or a lookup table, writes a dataset, reads or writes files, or points an asset
outside its folder; a .keras file with a vocabulary path or a foreign class; a TF.js model with an op TF.js
does not run. Each is refused by the allow-lists before anything loads it: exit 2, one line naming the op
(or asset, layer), and the marker its payload writes does not exist. The OS sandbox is switched off here,
so that the allow-lists alone are what is tested (``test_sandbox.py`` tests the sandbox alone)."""
from __future__ import annotations

from pathlib import Path

import pytest

import hostile_tf as H
from conftest import FIXTURES, by_id, check_json, run_cli
from test_sources import _need, refused

UNSANDBOXED = ("--sandbox", "off")


@pytest.fixture
def places(tmp_path) -> tuple[Path, Path, Path]:
    """(the model's folder, a secret and a marker outside it)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    secret = elsewhere / "secret.txt"
    secret.write_text("the secret\n")
    return tmp_path / "model" / "m", secret, elsewhere / "marker"


@pytest.mark.parametrize("name", sorted(H.SAVED_MODELS))
def test_a_hostile_savedmodel_is_refused_naming_its_op(places, name):
    _need("tensorflow")
    folder, secret, marker = places
    folder.parent.mkdir()
    what = H.SAVED_MODELS[name](folder, secret, marker)
    line = refused(folder, what, "refused", args=("--targets", "server", *UNSANDBOXED))
    assert line.startswith("error: m: refused: "), line
    assert not marker.exists(), "the payload ran"


def test_unvetted_the_crafted_savedmodels_do_what_they_say(places, tmp_path):
    """The control: under the allow-lists' debug switch and without the sandbox, the writers write."""
    _need("tensorflow")
    folder, secret, marker = places
    folder.parent.mkdir()
    H.read_write_file(folder, secret, marker)
    r = check_json(tmp_path, folder, "--targets", "server/tf", *UNSANDBOXED,
                   env={"PORTABILITY_DEBUG_NO_ALLOWLISTS": "1"}, expect_rc=None)
    assert marker.read_text() == "the secret\n"
    assert by_id(r)["server/tf"]["status"] == "pass"


@pytest.mark.parametrize("builder", [H.keras_vocabulary_file, H.keras_custom_layer])
def test_a_hostile_keras_file_is_refused_naming_its_layer(places, builder):
    _need("keras", "tensorflow")
    folder, secret, marker = places
    what = builder(folder, secret, marker)
    line = refused(folder / "model.keras", what, "refused", args=("--targets", "server", *UNSANDBOXED))
    assert "Lambda" not in line, line


def test_a_keras_lambda_is_refused_as_a_lambda(tmp_path):
    _need("keras", "tensorflow")
    import keras

    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Lambda(lambda x: x * 2, name="twice")])
    model.save(tmp_path / "lambda.keras")
    refused(tmp_path / "lambda.keras", "layer 'twice'", "Lambda layer (Python code)")


def test_a_tfjs_model_with_an_op_tfjs_does_not_run_is_refused(tmp_path):
    what = H.tfjs_unknown_op(tmp_path / "m", FIXTURES / "keras_cnn_tfjs")
    refused(tmp_path / "m", what, "refused", "TF.js does not run", args=("--targets", "server"))


def test_legitimate_savedmodels_pass_the_vetting(tmp_path):
    """Keras exports (an embedding LSTM, a GRU and bidirectional LSTM, a conv net with BatchNorm, GELU,
    depthwise conv, LayerNorm and Dropout, a StringLookup, a TextVectorization), tf.functions with control
    flow and a print to stderr, a vocabulary table from an asset, and the fixture's SavedModel."""
    _need("keras", "tensorflow")
    import keras
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    from portability.sources import tf_vet

    out = {}
    inp = keras.Input((16,), dtype="int32")
    out["lstm"] = keras.Model(inp, keras.layers.Dense(2)(keras.layers.LSTM(8)(keras.layers.Embedding(50, 8)(inp))))
    inp = keras.Input((10, 4))
    x = keras.layers.Bidirectional(keras.layers.LSTM(3))(keras.layers.GRU(6, return_sequences=True)(inp))
    out["gru"] = keras.Model(inp, keras.layers.Dense(2)(x))
    inp = keras.Input((16, 16, 3))
    x = keras.layers.BatchNormalization()(keras.layers.Conv2D(8, 3, padding="same")(inp))
    x = keras.layers.LayerNormalization()(keras.layers.DepthwiseConv2D(3)(keras.layers.Activation("gelu")(x)))
    x = keras.layers.Dense(3, activation="softmax")(keras.layers.GlobalAveragePooling2D()(keras.layers.Dropout(0.2)(x)))
    out["cnn"] = keras.Model(inp, x)
    inp = keras.Input((1,), dtype="string")
    out["lookup"] = keras.Model(inp, keras.layers.StringLookup(vocabulary=["a", "b", "c"])(inp))
    tv = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=5)
    tv.adapt(["hello world", "the cat sat"])
    out["textvec"] = keras.Model(inp, tv(inp))
    folders = []
    for name, m in out.items():
        m.export(str(tmp_path / name), verbose=False)
        folders.append(tmp_path / name)

    class Control(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def serve(self, x):
            y = x * 2 if tf.reduce_sum(x) > 0 else x - 1
            for _ in tf.range(3):
                y = y + 1.0
            tf.print("sum", tf.reduce_sum(y))
            return {"y": tf.nn.relu(y)}

    m = Control()
    tf.saved_model.save(m, str(tmp_path / "control"), signatures={"serving_default": m.serve})
    folders += [tmp_path / "control", FIXTURES / "keras_cnn_savedmodel"]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\nc\n")

    class Table(tf.Module):
        def __init__(self):
            self.table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
                str(vocab), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER), -1)

        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
        def serve(self, x):
            return {"y": x + tf.cast(self.table.lookup(tf.constant(["c"])), tf.float32)}

    m = Table()
    tf.saved_model.save(m, str(tmp_path / "table"), signatures={"serving_default": m.serve})
    folders.append(tmp_path / "table")
    for folder in folders:
        sm = saved_model_pb2.SavedModel()
        sm.ParseFromString((folder / "saved_model.pb").read_bytes())
        assert [tf_vet.refusal(mg, folder) for mg in sm.meta_graphs] == [None], folder.name
    p = run_cli("check", str(tmp_path / "table"), "--targets", "server/tf")  # its asset read in the sandbox
    assert p.returncode == 0, p.stderr
