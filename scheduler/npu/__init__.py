"""The NPU schedule passes: ``npu-map`` (which NPU program each stage becomes, as
marks), ``npu-cube-tile`` (the cube tiling of a matmul backbone in the tree) and the
typed plans their marks index (``plan.py``): cube tiles fitted to L1/L0/UB, the vector
mapping's dimension roles, phases, convolutions.  They read target data only; the NPU
IR is built by the lowering stage of ``polycomp.hw.npu``.  See docs/npu.md."""
