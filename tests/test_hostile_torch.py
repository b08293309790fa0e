"""The torch.export reader runs nothing from the file: crafted ``.pt2`` archives that ``torch.export.load``
would run code from (each keeping its real weights, so the check would pass) are refused with one line
naming the entry, before any payload runs, and legitimate programs read exactly as torch reads them."""
from __future__ import annotations

import json
import logging
import tempfile
import zipfile
from pathlib import Path

import pytest

import hostile_pt2 as H
from conftest import FIXTURES, by_id, check_json
from test_sources import _need, refused

SYSTEM_TMP = Path(tempfile.gettempdir())
#: the OS sandbox would stop a payload's write on its own: these checks run without it, so that a missing
#: marker means the reader ran nothing
UNSANDBOXED = ("--sandbox", "off")


def _aoti_dirs(*folders: Path) -> set[Path]:
    """AOTInductor's folders and files under ``folders`` (a folder another process removes meanwhile is
    skipped: the system's temp folder is shared with whatever else runs)."""
    import os

    return {Path(root) / n for f in folders for root, dirs, files in os.walk(f, onerror=lambda e: None)
            for n in dirs + files if n.startswith("aotinductor_")}


def _net():
    import torch

    class Net(torch.nn.Module):
        """A conv net with BatchNorm running statistics (buffers) and a tensor constant."""

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3)
            self.bn = torch.nn.BatchNorm2d(4)
            self.offset = torch.tensor([0.5, -1.0, 2.0, 0.0])

        def forward(self, x):
            return self.bn(self.conv(x)).mean((2, 3)) + self.offset

    torch.manual_seed(0)
    net = Net()
    net.bn.running_mean.uniform_(-1, 1)
    net.bn.running_var.uniform_(0.5, 2)
    return net.eval()


@pytest.fixture(scope="module")
def program():
    """The conv net exported with a dynamic batch."""
    _need("torch")
    import torch

    batch = torch.export.Dim("batch", min=1, max=64)
    return torch.export.export(_net(), (torch.randn(2, 1, 8, 8),), dynamic_shapes=({0: batch},))


@pytest.mark.parametrize("name", sorted(H.REFUSED))
def test_a_hostile_archive_is_refused_naming_its_entry(program, tmp_path, monkeypatch, name):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker, model = tmp_path / "payload-ran", tmp_path / f"{name}.pt2"
    entry = H.REFUSED[name](program, model, marker)
    before = _aoti_dirs(SYSTEM_TMP)
    monkeypatch.setenv("TMPDIR", str(tmp))
    line = refused(model, entry, "refused", args=("--targets", "server", *UNSANDBOXED))
    assert line.startswith(f"error: {model.name}: refused: "), line
    assert not marker.exists(), "the payload ran"
    assert not _aoti_dirs(tmp) and _aoti_dirs(SYSTEM_TMP) <= before


@pytest.mark.parametrize("name", sorted(H.IGNORED))
def test_a_hostile_part_that_every_archive_has_is_never_read(program, tmp_path, name):
    """Sample inputs (a pickle) and guards code: never read, so the program checks as it is."""
    marker, model = tmp_path / "payload-ran", tmp_path / f"{name}.pt2"
    H.IGNORED[name](program, model, marker)
    r = check_json(tmp_path, model, "--targets", "server/torch", *UNSANDBOXED)
    assert by_id(r)["server/torch"]["status"] == "pass"
    assert not marker.exists(), "the payload ran"


def test_a_symlinked_program_is_refused(program, tmp_path):
    from portability.core.errors import BadModel
    from portability.sources.torch_export import vet

    real, link = tmp_path / "real" / "model.pt2", tmp_path / "link.pt2"
    real.parent.mkdir()
    H.write(real, *H.entries(program))
    link.symlink_to(real)
    refused(link, "link.pt2", "is a symbolic link")
    with pytest.raises(BadModel, match="is a symbolic link"):
        vet(link)  # the reader refuses it too, whoever calls it


@pytest.mark.parametrize("name", sorted(set(H.REFUSED) - {"aoti_library", "unknown_entry"}) + sorted(H.IGNORED))
def test_the_crafted_archives_run_their_payload_under_torch_export_load(program, tmp_path, name):
    """The builders are live: torch.export.load (what the reader replaces) runs each payload and still
    yields a program that computes."""
    import torch

    marker, model = tmp_path / "payload-ran", tmp_path / f"{name}.pt2"
    {**H.REFUSED, **H.IGNORED}[name](program, model, marker)
    logging.disable(logging.CRITICAL)  # torch logs the failures it falls back from
    try:
        out = torch.export.load(str(model)).module()(torch.randn(3, 1, 8, 8))
    finally:
        logging.disable(logging.NOTSET)
    assert marker.exists() and out.shape == (3, 4)


# -- the reader against torch.export.load on legitimate programs ---------------------------------------------

def _programs():
    import torch

    class Outputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 5)

        def forward(self, x):
            y = self.fc(x)
            return y, y.softmax(-1), y.argmax(-1)

    class Views(torch.nn.Module):
        """Buffers that share one storage (a slice and a transpose) and an empty one."""

        def __init__(self):
            super().__init__()
            w = torch.randn(8, 4)
            self.register_buffer("w", w)
            self.register_buffer("rows", w[2:6])
            self.register_buffer("wt", w.t())
            self.register_buffer("empty", torch.zeros(0))

        def forward(self, x):
            return x @ self.w.t() + (x @ self.rows.t()).sum() + self.wt.sum() + self.empty.sum()

    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    batch = torch.export.Dim("batch", min=1, max=128)
    x4 = torch.randn(3, 4)
    return {
        "mlp": (mlp, x4, None),
        "conv_batchnorm_constant": (_net(), torch.randn(2, 1, 8, 8), None),
        "outputs": (Outputs(), x4, None),
        "views": (Views(), x4, None),
        "dynamic_batch": (mlp, x4, ({0: batch},)),
        "half": (torch.nn.Linear(4, 2).half(), x4.half(), None),
    }


@pytest.mark.parametrize("name", ["mlp", "conv_batchnorm_constant", "outputs", "views", "dynamic_batch", "half"])
def test_the_reader_reads_what_torch_export_load_reads(tmp_path, name):
    _need("torch")
    import torch

    from portability.sources.torch_export import open_program

    model, x, dynamic = _programs()[name]
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (x,), dynamic_shapes=dynamic), str(path))
    ours, theirs = open_program(path), torch.export.load(str(path))
    assert str(ours.graph_signature) == str(theirs.graph_signature)
    assert ours.graph_module.code == theirs.graph_module.code
    assert str(ours.range_constraints) == str(theirs.range_constraints)
    for mine, torchs in ((ours.state_dict, theirs.state_dict), (ours.constants, theirs.constants)):
        assert mine.keys() == torchs.keys()
        for k in torchs:
            assert type(mine[k]) is type(torchs[k]) and mine[k].stride() == torchs[k].stride()
            assert torch.equal(mine[k], torchs[k]), k
    xs = torch.randn((7, *x.shape[1:]) if dynamic else x.shape).to(x.dtype)
    got, want = ours.module()(xs), theirs.module()(xs)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_the_fixture_program_reads_as_torch_reads_it():
    _need("torch")
    import torch

    from portability.sources.torch_export import open_program

    ours, theirs = open_program(FIXTURES / "torch_cnn.pt2"), torch.export.load(str(FIXTURES / "torch_cnn.pt2"))
    x = torch.rand(1, 1, 28, 28)
    assert torch.equal(ours.module()(x), theirs.module()(x))


# -- what the allow-list refuses, in process ----------------------------------------------------------------

def _edit(program, dst: Path, edit) -> Path:
    root, files = H.entries(program)
    edit(files)
    return H.write(dst, root, files)


def _program_json(change):
    def edit(files):
        doc = json.loads(files["models/model.json"])
        change(doc)
        files["models/model.json"] = json.dumps(doc).encode()
    return edit


def _first_node(doc) -> dict:
    return doc["graph_module"]["graph"]["nodes"][0]


def _weights_json(change):
    def edit(files):
        doc = json.loads(files["data/weights/model_weights_config.json"])
        change(next(iter(doc["config"].values())))
        files["data/weights/model_weights_config.json"] = json.dumps(doc).encode()
    return edit


CASES = {
    "a target that is not an ATen operator": (
        _program_json(lambda d: _first_node(d).update(target="torch.os.system")),
        "models/model.json", "not an ATen operator"),
    "an ATen operator that reads files": (
        _program_json(lambda d: _first_node(d).update(target="torch.ops.aten.from_file.default")),
        "models/model.json", "from_file"),
    "a node name that is code": (
        _program_json(lambda d: _first_node(d).update(name="x; import os")), "models/model.json", "not a plain name"),
    "an argument name that is code": (
        _program_json(lambda d: d["graph_module"]["module_call_graph"][0]["signature"].update(
            forward_arg_names=["x=open('f','w')"])), "models/model.json", "not a plain name"),
    "a carriage return in a stack trace": (
        _program_json(lambda d: _first_node(d)["metadata"].update(stack_trace='File "a\rimport os", line 1, in f\n x')),
        "models/model.json", "control character"),
    "an input key with a quote": (
        _program_json(lambda d: d["graph_module"]["module_call_graph"][0]["signature"].update(
            in_spec=json.dumps([1, {"type": "builtins.dict", "context": json.dumps(["a'b"]), "children_spec": []}]))),
        "models/model.json", "key"),
    "an output of a Hugging Face output class": (
        _program_json(lambda d: d["graph_module"]["module_call_graph"][0]["signature"].update(
            out_spec=json.dumps([1, {"type": "transformers.modeling_outputs.BaseModelOutput",
                                     "context": json.dumps(["last_hidden_state"]), "children_spec": []}]))),
        "models/model.json", "holds transformers.modeling_outputs.BaseModelOutput (only tuples, lists and dicts are "
                             "read: export a module that returns a tuple — for a Hugging Face model, return_dict=False)"),
    "a custom object input": (
        _program_json(lambda d: d["graph_module"]["signature"]["input_specs"].append(
            {"custom_obj": {"arg": {"name": "obj", "class_fqn": "__torch__.Evil"}, "custom_obj_name": "obj"}})),
        "models/model.json", "custom object"),
    "a weight reaching past its bytes": (
        _weights_json(lambda m: m["tensor_meta"]["sizes"][0].update(as_int=10_000)),
        "model_weights_config.json", "reaches past"),
    "a weight pointing to a missing file": (
        _weights_json(lambda m: m.update(path_name="weight_77")), "model_weights_config.json", "lacks"),
    "a weight on another device": (
        _weights_json(lambda m: m["tensor_meta"].update(device={"type": "cuda", "index": 0})),
        "model_weights_config.json", "CPU"),
    "a raw file no configuration names": (
        lambda f: f.update({"data/weights/weight_99": b"\0" * 8}), "data/weights/weight_99", "not referenced"),
    "another archive version": (
        lambda f: f.update(archive_version=b"1"), "archive_version", "reads '0' only"),
    "big-endian tensors": (
        lambda f: f.update(byteorder=b"big"), "byteorder", "reads 'little' only"),
    "no archive_format": (
        lambda f: f.pop("archive_format"), "archive_format", "missing"),
    "a name that climbs out": (
        lambda f: f.update({"../evil": b"x"}), "../evil", "unsafe entry name"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_reader_refuses(program, tmp_path, case):
    from portability.core.errors import BadModel
    from portability.sources.torch_export import vet

    edit, entry, why = CASES[case]
    path = _edit(program, tmp_path / "model.pt2", edit)
    with pytest.raises(BadModel) as e:
        vet(path)
    line = str(e.value)
    assert "\n" not in line and "refused" in line and entry in line and why in line, line


def _rezip(program, dst: Path, compress: int = zipfile.ZIP_STORED, twice: str | None = None) -> Path:
    root, files = H.entries(program)
    with zipfile.ZipFile(dst, "w", compress) as z:
        for rel, data in files.items():
            z.writestr(f"{root}/{rel}", data)
        if twice:
            z.writestr(f"{root}/{twice}", files[twice])
    return dst


def test_compressed_duplicated_and_too_many_entries_are_refused(program, tmp_path, monkeypatch):
    import warnings

    from portability.core.errors import BadModel
    from portability.sources import torch_export
    with pytest.raises(BadModel, match="refused: .*compressed"):
        torch_export.vet(_rezip(program, tmp_path / "deflated.pt2", zipfile.ZIP_DEFLATED))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it writes
        twice = _rezip(program, tmp_path / "twice.pt2", twice="models/model.json")
    with pytest.raises(BadModel, match="refused: .*models/model.json: appears twice"):
        torch_export.vet(twice)
    monkeypatch.setattr(torch_export, "_MAX_ENTRIES", 5)
    with pytest.raises(BadModel, match="refused: .*entries: more than 5 entries"):
        torch_export.vet(_rezip(program, tmp_path / "many.pt2"))


def test_the_sample_inputs_are_never_opened(program, tmp_path):
    """The reader never opens the sample inputs: an archive whose sample inputs are garbage still reads."""
    from portability.sources.torch_export import open_program

    import torch

    path = _edit(program, tmp_path / "model.pt2", lambda f: f.update({"data/sample_inputs/model.pt": b"not a pickle"}))
    ep = open_program(path)
    assert ep.example_inputs is None and ep.module()(torch.randn(5, 1, 8, 8)).shape == (5, 4)
