"""NPU program construction: tiling fitted to L1/L0/UB, cube tensorization of
contraction backbones, vector-unit mapping of row-wise memory-bound stages, ping-pong
buffers and set/wait flag placement.  See docs/npu.md."""
