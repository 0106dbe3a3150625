"""Hugging Face models through ``torch.compile(model, backend="polycomp")`` against eager.

``BertModel``, ``GPT2Model`` and ``ViTModel`` with 2 layers, built by ``transformers`` from a
config with random weights (nothing is downloaded), eval mode, ``torch.no_grad()``,
``dynamic=True``: several batch sizes and sequence lengths (text: with a padding attention
mask) must match eager (fp32, rtol 1e-4).  The backend runs with ``strict`` (an internal
error or an import that disagrees with torch fails the test instead of running eagerly);
what polycomp cannot compile runs eagerly, decided at compile time with one
``polycomp: running ...`` line.
Slow (a minute or more per model on a shared 2-core host: Dynamo's tracing, and each
compiled piece built by gcc).
"""
from __future__ import annotations

import sys

import pytest
import torch

VOCAB = 100


def _transformers(monkeypatch):
    """``import transformers``; a torchvision that does not load with this torch (built
    for another version) is hidden from it (transformers would import it for vision)."""
    try:
        import torchvision  # noqa: F401
    except Exception:
        monkeypatch.setitem(sys.modules, "torchvision", None)
    import transformers
    return transformers


def _bert(t):
    return t.BertModel(t.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                    intermediate_size=128, vocab_size=VOCAB,
                                    max_position_embeddings=64))


def _gpt2(t):
    return t.GPT2Model(t.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                    n_positions=64, bos_token_id=0, eos_token_id=0))


def _vit(t):
    return t.ViTModel(t.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, image_size=32, patch_size=8))


def _text(b, s):
    mask = torch.ones(b, s, dtype=torch.long)
    mask[-1, s // 2:] = 0  # the last sequence is padded
    return {"input_ids": torch.randint(0, VOCAB, (b, s)), "attention_mask": mask}


def _image(b, s):
    return {"pixel_values": torch.randn(b, 3, 32, 32)}


MODELS = {"bert": (_bert, _text), "gpt2": (_gpt2, _text), "vit": (_vit, _image)}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_hugging_face_model_matches_eager(name, monkeypatch, capsys):
    from polycomp.graph.dynamo import polycomp_backend
    t = _transformers(monkeypatch)
    torch.manual_seed(0)
    build, make = MODELS[name]
    m = build(t).eval()
    reports = []

    def backend(gm, example_inputs):
        fn = polycomp_backend(gm, example_inputs, options={"strict": True})
        reports.append(fn.polycomp_report)
        return fn
    torch._dynamo.reset()
    cm = torch.compile(m, backend=backend, dynamic=True)
    for b, s in ((1, 8), (2, 13), (3, 5)):
        args = make(b, s)
        with torch.no_grad():
            ref = m(**args).last_hidden_state
            compiled_before = len(reports)
            got = cm(**args).last_hidden_state
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
        assert not torch.isnan(got).any()
        # eager decisions are made when a graph is compiled, never at a later call
        said = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("polycomp:")]
        assert len(said) == sum(len(r.eager) for r in reports[compiled_before:]), said
        assert all(line.startswith("polycomp: running") for line in said), said
    assert reports, "Dynamo handed the backend no graph"
    assert sum(r.compiled for r in reports) >= len(reports), \
        [(r.compiled, r.pieces, r.eager) for r in reports]
    # all three compile whole: nothing runs eagerly (GPT-2's ``torch.tensor([])`` KV cache
    # is a graph constant)
    assert not [line for r in reports for line in r.eager], [r.eager for r in reports]


def _onnx_export(model, args, names, dyn):
    import io
    import warnings
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, f, input_names=names, output_names=["y"],
                          dynamic_axes=dyn, opset_version=17, dynamo=False)
    return f.getvalue()


@pytest.mark.slow
def test_bert_onnx_export_imports_and_matches_eager(monkeypatch):
    """``torch.onnx.export`` (TorchScript exporter, symbolic B and S) of ``BertModel``
    with a padding mask and token types: transformers' mask builder (``Range``,
    ``ConstantOfShape``, comparisons, ``And``, ``Where``, ``Expand``, a gather with
    computed indices) and, with SDPA, the exported attention (a bool mask as ``Where(m,
    0, -inf)``, ``IsNaN`` zeroing a fully masked row) import (before: ``Slice``, ``Cast``,
    ``ConstantOfShape`` unsupported, and a misleading ``ShapeMismatchError``) and match
    eager at several sizes from one compilation; a sequence whose mask is all zeros too.
    (Slow: transformers' import; ``test_onnx_mask_and_attention_ops_of_an_export`` in
    test_graph_models.py exports the same ONNX ops from a small module.)"""
    from polycomp.graph import compile_graph
    from polycomp.graph.onnx_import import import_onnx
    t = _transformers(monkeypatch)
    torch.manual_seed(0)
    m = t.BertModel(t.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                 intermediate_size=64, vocab_size=VOCAB,
                                 max_position_embeddings=32, attn_implementation="sdpa"))

    class Last(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, ids, mask, types):
            return self.m(input_ids=ids, attention_mask=mask,
                          token_type_ids=types).last_hidden_state
    w = Last().eval()  # (export leaves a module in training mode as it found it)
    names = ["ids", "mask", "types"]
    args = (torch.zeros(2, 5, dtype=torch.long),) * 2 + (torch.zeros(2, 5, dtype=torch.long),)
    onnx_bytes = _onnx_export(w, args, names, {n: {0: "B", 1: "S"} for n in names + ["y"]})
    cg = compile_graph(import_onnx(onnx_bytes), "c")
    for b, s in ((2, 7), (1, 1), (3, 4)):
        ids, types = torch.randint(0, VOCAB, (b, s)), torch.randint(0, 2, (b, s))
        mask = torch.ones(b, s, dtype=torch.long)
        mask[-1, s // 2:] = 0
        if b == 3:
            mask[0] = 0   # every key masked
        with torch.no_grad():
            ref = w(ids, mask, types)
        got = torch.as_tensor(cg(ids.numpy(), mask.numpy(), types.numpy()))
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
