"""The NPU targets (``npu``, ``npu-lite``): an Ascend 910-class AI core as data, the
NPU-level instruction program, its simulator and the Ascend C-style printer.
See docs/npu.md."""
