"""The NPU targets (``npu``, ``npu-lite``): an Ascend 910-class AI core as data, the
NPU IR (``program.py``), the lowering stage ``npu-lower`` that builds it from the
lowered function and the NPU schedule passes' plans (``lower*.py``), the NPU IR
passes (``passes.py``, ``sync.py``), its simulator and the Ascend C-style printer.
See docs/npu.md."""
