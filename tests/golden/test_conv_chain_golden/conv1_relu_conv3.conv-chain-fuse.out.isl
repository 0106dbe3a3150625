domain: "[Nb, C, H, W, F1, F2] -> { O_acc_update[n, ty, tx, g, q, f, a2, b2] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 32ty < H and tx >= 0 and 32tx < W and 0 <= g < F2 and 0 <= q <= 1023 and 0 <= f < F1 and 0 <= a2 <= 2 and 0 <= b2 <= 2; T_tile_update[n, ty, tx, f, p, c, a = 0, b = 0] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 32ty < H and tx >= 0 and 32tx < W and 0 <= f < F1 and 0 <= p <= 1155 and 0 <= c < C; O_acc_init[n, ty, tx, g, q] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 32ty < H and tx >= 0 and 32tx < W and 0 <= g < F2 and 0 <= q <= 1023; R_pad[n, ty, tx, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and 0 <= f < F1 and ((ty = 0 and i = 0 and H > 0 and tx >= 0 and 32tx < W and 0 <= j <= 33) or (ty >= 0 and 32ty < H and tx >= 0 and 32tx < W and H - 32ty < i <= 33 and 0 <= j <= 33) or (ty >= 0 and 32ty < H and tx >= 0 and 32tx < W and i >= 0 and -32ty < i <= 33 and i <= H - 32ty and W - 32tx < j <= 33) or (tx = 0 and j = 0 and W > 0 and ty >= 0 and 32ty < H and i >= 0 and -32ty < i <= 33 and i <= H - 32ty)); T_tile_init[n, ty, tx, f, p] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 32ty < H and tx >= 0 and 32tx < W and 0 <= f < F1 and 0 <= p <= 1155; O_store[n, ty, tx, g, i2, j2] : C > 0 and F1 > 0 and 0 <= n < Nb and tx >= 0 and 0 <= g < F2 and i2 >= 0 and j2 >= 0 and ((ty >= 0 and 32ty <= -32 + H and 32tx <= -32 + W and i2 <= 31 and j2 <= 31) or (ty >= 0 and 32ty <= -32 + H and 32tx >= -31 + W and i2 <= 31 and j2 < W - 32tx) or (H > 0 and 32ty >= -31 + H and 32tx <= -32 + W and i2 < H - 32ty and j2 <= 31) or (H > 0 and 32ty >= -31 + H and 32tx >= -31 + W and i2 < H - 32ty and j2 < W - 32tx)); X_im2col[n, ty, tx, c, a = 0, b = 0, i, j] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 32ty < H and tx >= 0 and 32tx < W and 0 <= c < C and 0 <= i <= 33 and 0 <= j <= 33; R_t[n, ty, tx, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and ty > 0 and 32ty < H and tx > 0 and 32tx < W and 0 <= f < F1 and i >= 0 and j >= 0 and ((32ty <= -33 + H and 32tx <= -33 + W and i <= 33 and j <= 33) or (32ty <= -33 + H and 32tx >= -32 + W and i <= 33 and j <= W - 32tx) or (32ty >= -32 + H and 32tx <= -33 + W and i <= H - 32ty and j <= 33) or (32ty >= -32 + H and 32tx >= -32 + W and i <= H - 32ty and j <= W - 32tx)); R_t[n, ty, tx = 0, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and ty > 0 and 32ty < H and 0 <= f < F1 and i >= 0 and j > 0 and ((W >= 33 and 32ty <= -33 + H and i <= 33 and j <= 33) or (W <= 32 and 32ty <= -33 + H and i <= 33 and j <= W) or (W >= 33 and 32ty >= -32 + H and i <= H - 32ty and j <= 33) or (W <= 32 and 32ty >= -32 + H and i <= H - 32ty and j <= W)); R_t[n, ty = 0, tx = 0, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and 0 <= f < F1 and i > 0 and j > 0 and ((H >= 33 and W >= 33 and i <= 33 and j <= 33) or (H >= 33 and W <= 32 and i <= 33 and j <= W) or (H <= 32 and W >= 33 and i <= H and j <= 33) or (H <= 32 and W <= 32 and i <= H and j <= W)); R_t[n, ty = 0, tx, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and tx > 0 and 32tx < W and 0 <= f < F1 and i > 0 and j >= 0 and ((H >= 33 and 32tx <= -33 + W and i <= 33 and j <= 33) or (H <= 32 and 32tx <= -33 + W and i <= H and j <= 33) or (H >= 33 and 32tx >= -32 + W and i <= 33 and j <= W - 32tx) or (H <= 32 and 32tx >= -32 + W and i <= H and j <= W - 32tx)); R_im2col[n, ty, tx, f, a2, b2, i2, j2] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 32ty < H and tx >= 0 and 32tx < W and 0 <= f < F1 and 0 <= a2 <= 2 and 0 <= b2 <= 2 and 0 <= i2 <= 31 and 0 <= j2 <= 31 }"
child:
  mark: "conv_chain_fused:0"
  child:
    mark: "cpu_parallel"
    child:
      schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_init[i0, i1, i2, i3, i4] -> [(i0)]; R_pad[i0, i1, i2, i3, i4, i5] -> [(i0)]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i0)]; O_store[i0, i1, i2, i3, i4, i5] -> [(i0)]; X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i0)]; R_t[i0, i1, i2, i3, i4, i5] -> [(i0)]; O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i0)]; R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i0)]; T_tile_init[i0, i1, i2, i3, i4] -> [(i0)] }, { O_acc_init[i0, i1, i2, i3, i4] -> [(i1)]; R_pad[i0, i1, i2, i3, i4, i5] -> [(i1)]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i1)]; O_store[i0, i1, i2, i3, i4, i5] -> [(i1)]; X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i1)]; R_t[i0, i1, i2, i3, i4, i5] -> [(i1)]; O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i1)]; R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i1)]; T_tile_init[i0, i1, i2, i3, i4] -> [(i1)] }, { O_acc_init[i0, i1, i2, i3, i4] -> [(i2)]; R_pad[i0, i1, i2, i3, i4, i5] -> [(i2)]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i2)]; O_store[i0, i1, i2, i3, i4, i5] -> [(i2)]; X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i2)]; R_t[i0, i1, i2, i3, i4, i5] -> [(i2)]; O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i2)]; R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i2)]; T_tile_init[i0, i1, i2, i3, i4] -> [(i2)] }]"
      permutable: 1
      coincident: [ 1, 1, 1 ]
      child:
        mark: "cpu_local:1"
        child:
          sequence:
          - filter: "[Nb, C, H, W, F1, F2] -> { X_im2col[n, ty, tx, c, a, b, i, j] }"
            child:
              schedule: "[Nb, C, H, W, F1, F2] -> [{ X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i3)] }, { X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i4)] }, { X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i5)] }, { X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i6)] }, { X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i7)] }]"
              permutable: 1
              coincident: [ 1, 1, 1, 1, 1 ]
          - filter: "[Nb, C, H, W, F1, F2] -> { O_acc_init[n, ty, tx, g, q] }"
            child:
              schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_init[i0, i1, i2, i3, i4] -> [(i3)] }, { O_acc_init[i0, i1, i2, i3, i4] -> [(i4)] }]"
              permutable: 1
              coincident: [ 1, 1 ]
          - filter: "[Nb, C, H, W, F1, F2] -> { O_acc_update[n, ty, tx, g, q, f, a2, b2]; T_tile_update[n, ty, tx, f, p, c, a, b]; R_pad[n, ty, tx, f, i, j]; T_tile_init[n, ty, tx, f, p]; R_t[n, ty, tx, f, i, j]; R_im2col[n, ty, tx, f, a2, b2, i2, j2] }"
            child:
              schedule: "[Nb, C, H, W, F1, F2] -> [{ R_pad[i0, i1, i2, i3, i4, i5] -> [(floor((i3)/6))]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(floor((i3)/6))]; R_t[i0, i1, i2, i3, i4, i5] -> [(floor((i3)/6))]; O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(floor((i5)/6))]; R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(floor((i3)/6))]; T_tile_init[i0, i1, i2, i3, i4] -> [(floor((i3)/6))] }]"
              permutable: 1
              child:
                mark: "cpu_local:0"
                child:
                  sequence:
                  - filter: "[Nb, C, H, W, F1, F2] -> { T_tile_update[n, ty, tx, f, p, c, a, b]; T_tile_init[n, ty, tx, f, p] }"
                    child:
                      schedule: "[Nb, C, H, W, F1, F2] -> [{ T_tile_init[i0, i1, i2, i3, i4] -> [(0)]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(0)] }, { T_tile_init[i0, i1, i2, i3, i4] -> [(floor((i4)/64))]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(floor((i4)/64))] }]"
                      permutable: 1
                      coincident: [ 1, 1 ]
                      options: "[Nb, C, H, W, F1, F2] -> { isolate[[i0, i1, i2, i3] -> [0, i5]] : C > 0 and F2 > 0 and 0 <= i0 < Nb and i1 >= 0 and 32i1 < H and i2 >= 0 and 32i2 < W and i3 >= 0 and 6i3 <= -6 + F1 and 0 <= i5 <= 17 }"
                      child:
                        sequence:
                        - filter: "[Nb, C, H, W, F1, F2] -> { T_tile_init[n, ty, tx, f, p] }"
                          child:
                            schedule: "[Nb, C, H, W, F1, F2] -> [{ T_tile_init[i0, i1, i2, i3, i4] -> [((i3) mod 6)] }, { T_tile_init[i0, i1, i2, i3, i4] -> [((i4) mod 64)] }]"
                            permutable: 1
                            coincident: [ 1, 1 ]
                        - filter: "[Nb, C, H, W, F1, F2] -> { T_tile_update[n, ty, tx, f, p, c, a, b] }"
                          child:
                            mark: "cpu_microkernel"
                            child:
                              schedule: "[Nb, C, H, W, F1, F2] -> [{ T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i5)] }, { T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i6)] }, { T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i7)] }]"
                              permutable: 1
                              child:
                                schedule: "[Nb, C, H, W, F1, F2] -> [{ T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [((i3) mod 6)] }, { T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [((i4) mod 64)] }]"
                                permutable: 1
                                coincident: [ 1, 1 ]
                  - filter: "[Nb, C, H, W, F1, F2] -> { R_t[n, ty, tx, f, i, j] }"
                    child:
                      schedule: "[Nb, C, H, W, F1, F2] -> [{ R_t[i0, i1, i2, i3, i4, i5] -> [(i3)] }, { R_t[i0, i1, i2, i3, i4, i5] -> [(i4)] }, { R_t[i0, i1, i2, i3, i4, i5] -> [(i5)] }]"
                      permutable: 1
                      coincident: [ 1, 1, 1 ]
                  - filter: "[Nb, C, H, W, F1, F2] -> { R_pad[n, ty, tx, f, i, j] }"
                    child:
                      schedule: "[Nb, C, H, W, F1, F2] -> [{ R_pad[i0, i1, i2, i3, i4, i5] -> [(i3)] }, { R_pad[i0, i1, i2, i3, i4, i5] -> [(i4)] }, { R_pad[i0, i1, i2, i3, i4, i5] -> [(i5)] }]"
                      permutable: 1
                      coincident: [ 1, 1, 1 ]
                  - filter: "[Nb, C, H, W, F1, F2] -> { R_im2col[n, ty, tx, f, a2, b2, i2, j2] }"
                    child:
                      schedule: "[Nb, C, H, W, F1, F2] -> [{ R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i3)] }, { R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i4)] }, { R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i5)] }, { R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i6)] }, { R_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i7)] }]"
                      permutable: 1
                      coincident: [ 1, 1, 1, 1, 1 ]
                  - filter: "[Nb, C, H, W, F1, F2] -> { O_acc_update[n, ty, tx, g, q, f, a2, b2] }"
                    child:
                      schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(floor((i3)/6))] }, { O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(floor((i4)/64))] }]"
                      permutable: 1
                      coincident: [ 1, 1 ]
                      options: "[Nb, C, H, W, F1, F2] -> { isolate[[i0, i1, i2, i3] -> [i4, i5]] : C > 0 and 0 <= i0 < Nb and i1 >= 0 and 32i1 < H and i2 >= 0 and 32i2 < W and i3 >= 0 and 6i3 < F1 and i4 >= 0 and 6i4 <= -6 + F2 and 0 <= i5 <= 15 }"
                      child:
                        mark: "cpu_microkernel"
                        child:
                          schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i5)] }, { O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i6)] }, { O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i7)] }]"
                          permutable: 1
                          child:
                            schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [((i3) mod 6)] }, { O_acc_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [((i4) mod 64)] }]"
                            permutable: 1
                            coincident: [ 1, 1 ]
          - filter: "[Nb, C, H, W, F1, F2] -> { O_store[n, ty, tx, g, i2, j2] }"
            child:
              schedule: "[Nb, C, H, W, F1, F2] -> [{ O_store[i0, i1, i2, i3, i4, i5] -> [(i3)] }, { O_store[i0, i1, i2, i3, i4, i5] -> [(i4)] }, { O_store[i0, i1, i2, i3, i4, i5] -> [(i5)] }]"
              permutable: 1
              coincident: [ 1, 1, 1 ]
