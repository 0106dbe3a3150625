domain: "[Nb, C, H, W, F1, F2] -> { T_tile_update[n, ty, tx, f, p, c, a, b] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 16ty < H and tx >= 0 and 16tx < W and 0 <= f < F1 and 0 <= p <= 255 and 0 <= c < C and 0 <= a <= 2 and 0 <= b <= 2; O_acc_init[n, ty, tx, g, q] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 16ty < H and tx >= 0 and 16tx < W and 0 <= g < F2 and 0 <= q <= 255; R_pad[n, ty, tx, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and tx >= 0 and 16tx < W and 0 <= f < F1 and i <= 15 and j <= 15 and ((16ty < H and i >= H - 16ty and j >= 0) or (0 <= i < H - 16ty and j >= W - 16tx)); T_tile_init[n, ty, tx, f, p] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 16ty < H and tx >= 0 and 16tx < W and 0 <= f < F1 and 0 <= p <= 255; O_acc_update[n, ty, tx, g, q, f] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 16ty < H and tx >= 0 and 16tx < W and 0 <= g < F2 and 0 <= q <= 255 and 0 <= f < F1; O_store[n, ty, tx, g, i2, j2] : C > 0 and F1 > 0 and 0 <= n < Nb and tx >= 0 and 0 <= g < F2 and i2 >= 0 and j2 >= 0 and ((ty >= 0 and 16ty <= -16 + H and 16tx <= -16 + W and i2 <= 15 and j2 <= 15) or (ty >= 0 and 16ty <= -16 + H and 16tx >= -15 + W and i2 <= 15 and j2 < W - 16tx) or (H > 0 and 16ty >= -15 + H and 16tx <= -16 + W and i2 < H - 16ty and j2 <= 15) or (H > 0 and 16ty >= -15 + H and 16tx >= -15 + W and i2 < H - 16ty and j2 < W - 16tx)); Bi_t[n, ty, tx, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and ty > 0 and tx > 0 and 0 <= f < F1 and i >= 0 and j >= 0 and ((16ty <= -16 + H and 16tx <= -16 + W and i <= 15 and j <= 15) or (16ty <= -16 + H and 16tx >= -15 + W and i <= 15 and j < W - 16tx) or (16ty >= -15 + H and 16tx <= -16 + W and i < H - 16ty and j <= 15) or (16ty >= -15 + H and 16tx >= -15 + W and i < H - 16ty and j < W - 16tx)); Bi_t[n, ty, tx = 0, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and ty > 0 and 0 <= f < F1 and i >= 0 and j >= 0 and ((W >= 16 and 16ty <= -16 + H and i <= 15 and j <= 15) or (W >= 16 and 16ty >= -15 + H and i < H - 16ty and j <= 15) or (W <= 15 and 16ty <= -16 + H and i <= 15 and j < W) or (W <= 15 and 16ty >= -15 + H and i < H - 16ty and j < W)); Bi_t[n, ty = 0, tx = 0, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and 0 <= f < F1 and i >= 0 and j >= 0 and ((H >= 16 and W >= 16 and i <= 15 and j <= 15) or (H >= 16 and W <= 15 and i <= 15 and j < W) or (H <= 15 and W >= 16 and i < H and j <= 15) or (H <= 15 and W <= 15 and i < H and j < W)); Bi_t[n, ty = 0, tx, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and tx > 0 and 0 <= f < F1 and i >= 0 and j >= 0 and ((H >= 16 and 16tx <= -16 + W and i <= 15 and j <= 15) or (H >= 16 and 16tx >= -15 + W and i <= 15 and j < W - 16tx) or (H <= 15 and 16tx <= -16 + W and i < H and j <= 15) or (H <= 15 and 16tx >= -15 + W and i < H and j < W - 16tx)); X_im2col[n, ty, tx, c, a, b, i, j] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and ty >= 0 and 16ty < H and tx >= 0 and 16tx < W and 0 <= c < C and 0 <= a <= 2 and 0 <= b <= 2 and 0 <= i <= 15 and 0 <= j <= 15; R_t[n, ty, tx, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and ty > 0 and tx > 0 and 0 <= f < F1 and i >= 0 and j >= 0 and ((16ty <= -16 + H and 16tx <= -16 + W and i <= 15 and j <= 15) or (16ty <= -16 + H and 16tx >= -15 + W and i <= 15 and j < W - 16tx) or (16ty >= -15 + H and 16tx <= -16 + W and i < H - 16ty and j <= 15) or (16ty >= -15 + H and 16tx >= -15 + W and i < H - 16ty and j < W - 16tx)); R_t[n, ty, tx = 0, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and ty > 0 and 0 <= f < F1 and i >= 0 and j >= 0 and ((W >= 16 and 16ty <= -16 + H and i <= 15 and j <= 15) or (W >= 16 and 16ty >= -15 + H and i < H - 16ty and j <= 15) or (W <= 15 and 16ty <= -16 + H and i <= 15 and j < W) or (W <= 15 and 16ty >= -15 + H and i < H - 16ty and j < W)); R_t[n, ty = 0, tx = 0, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and 0 <= f < F1 and i >= 0 and j >= 0 and ((H >= 16 and W >= 16 and i <= 15 and j <= 15) or (H >= 16 and W <= 15 and i <= 15 and j < W) or (H <= 15 and W >= 16 and i < H and j <= 15) or (H <= 15 and W <= 15 and i < H and j < W)); R_t[n, ty = 0, tx, f, i, j] : C > 0 and F2 > 0 and 0 <= n < Nb and tx > 0 and 0 <= f < F1 and i >= 0 and j >= 0 and ((H >= 16 and 16tx <= -16 + W and i <= 15 and j <= 15) or (H >= 16 and 16tx >= -15 + W and i <= 15 and j < W - 16tx) or (H <= 15 and 16tx <= -16 + W and i < H and j <= 15) or (H <= 15 and 16tx >= -15 + W and i < H and j < W - 16tx)) }"
child:
  mark: "conv_chain_fused:0"
  child:
    mark: "cpu_parallel"
    child:
      schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_init[i0, i1, i2, i3, i4] -> [(i0)]; R_pad[i0, i1, i2, i3, i4, i5] -> [(i0)]; O_acc_update[i0, i1, i2, i3, i4, i5] -> [(i0)]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i0)]; O_store[i0, i1, i2, i3, i4, i5] -> [(i0)]; Bi_t[i0, i1, i2, i3, i4, i5] -> [(i0)]; X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i0)]; R_t[i0, i1, i2, i3, i4, i5] -> [(i0)]; T_tile_init[i0, i1, i2, i3, i4] -> [(i0)] }, { O_acc_init[i0, i1, i2, i3, i4] -> [(i1)]; R_pad[i0, i1, i2, i3, i4, i5] -> [(i1)]; O_acc_update[i0, i1, i2, i3, i4, i5] -> [(i1)]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i1)]; O_store[i0, i1, i2, i3, i4, i5] -> [(i1)]; Bi_t[i0, i1, i2, i3, i4, i5] -> [(i1)]; X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i1)]; R_t[i0, i1, i2, i3, i4, i5] -> [(i1)]; T_tile_init[i0, i1, i2, i3, i4] -> [(i1)] }, { O_acc_init[i0, i1, i2, i3, i4] -> [(i2)]; R_pad[i0, i1, i2, i3, i4, i5] -> [(i2)]; O_acc_update[i0, i1, i2, i3, i4, i5] -> [(i2)]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i2)]; O_store[i0, i1, i2, i3, i4, i5] -> [(i2)]; Bi_t[i0, i1, i2, i3, i4, i5] -> [(i2)]; X_im2col[i0, i1, i2, i3, i4, i5, i6, i7] -> [(i2)]; R_t[i0, i1, i2, i3, i4, i5] -> [(i2)]; T_tile_init[i0, i1, i2, i3, i4] -> [(i2)] }]"
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
          - filter: "[Nb, C, H, W, F1, F2] -> { T_tile_update[n, ty, tx, f, p, c, a, b]; R_pad[n, ty, tx, f, i, j]; T_tile_init[n, ty, tx, f, p]; O_acc_update[n, ty, tx, g, q, f]; Bi_t[n, ty, tx, f, i, j]; R_t[n, ty, tx, f, i, j] }"
            child:
              schedule: "[Nb, C, H, W, F1, F2] -> [{ R_pad[i0, i1, i2, i3, i4, i5] -> [(floor((i3)/64))]; O_acc_update[i0, i1, i2, i3, i4, i5] -> [(floor((i5)/64))]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(floor((i3)/64))]; Bi_t[i0, i1, i2, i3, i4, i5] -> [(floor((i3)/64))]; R_t[i0, i1, i2, i3, i4, i5] -> [(floor((i3)/64))]; T_tile_init[i0, i1, i2, i3, i4] -> [(floor((i3)/64))] }]"
              permutable: 1
              child:
                mark: "cpu_local:0"
                child:
                  sequence:
                  - filter: "[Nb, C, H, W, F1, F2] -> { T_tile_update[n, ty, tx, f, p, c, a, b]; T_tile_init[n, ty, tx, f, p] }"
                    child:
                      schedule: "[Nb, C, H, W, F1, F2] -> [{ T_tile_init[i0, i1, i2, i3, i4] -> [(-11*floor((i3)/64) + floor((i3 + 2*floor((i3)/64))/6))]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(-11*floor((i3)/64) + floor((i3 + 2*floor((i3)/64))/6))] }, { T_tile_init[i0, i1, i2, i3, i4] -> [(floor((i4)/64))]; T_tile_update[i0, i1, i2, i3, i4, i5, i6, i7] -> [(floor((i4)/64))] }]"
                      permutable: 1
                      coincident: [ 1, 1 ]
                      options: "[Nb, C, H, W, F1, F2] -> { isolate[[i0, i1, i2, i3] -> [i4, i5]] : C > 0 and F2 > 0 and 0 <= i0 < Nb and i1 >= 0 and 16i1 < H and i2 >= 0 and 16i2 < W and i3 >= 0 and 0 <= i4 <= 9 and 6i4 <= -6 + F1 - 64i3 and 0 <= i5 <= 3 }"
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
                  - filter: "[Nb, C, H, W, F1, F2] -> { Bi_t[n, ty, tx, f, i, j] }"
                    child:
                      schedule: "[Nb, C, H, W, F1, F2] -> [{ Bi_t[i0, i1, i2, i3, i4, i5] -> [(i3)] }, { Bi_t[i0, i1, i2, i3, i4, i5] -> [(i4)] }, { Bi_t[i0, i1, i2, i3, i4, i5] -> [(i5)] }]"
                      permutable: 1
                      coincident: [ 1, 1, 1 ]
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
                  - filter: "[Nb, C, H, W, F1, F2] -> { O_acc_update[n, ty, tx, g, q, f] }"
                    child:
                      schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_update[i0, i1, i2, i3, i4, i5] -> [(floor((i3)/6))] }, { O_acc_update[i0, i1, i2, i3, i4, i5] -> [(floor((i4)/64))] }]"
                      permutable: 1
                      coincident: [ 1, 1 ]
                      options: "[Nb, C, H, W, F1, F2] -> { isolate[[i0, i1, i2, i3] -> [i4, i5]] : C > 0 and 0 <= i0 < Nb and i1 >= 0 and 16i1 < H and i2 >= 0 and 16i2 < W and i3 >= 0 and 64i3 < F1 and i4 >= 0 and 6i4 <= -6 + F2 and 0 <= i5 <= 3 }"
                      child:
                        mark: "cpu_microkernel"
                        child:
                          schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_update[i0, i1, i2, i3, i4, i5] -> [(i5)] }]"
                          permutable: 1
                          child:
                            schedule: "[Nb, C, H, W, F1, F2] -> [{ O_acc_update[i0, i1, i2, i3, i4, i5] -> [((i3) mod 6)] }, { O_acc_update[i0, i1, i2, i3, i4, i5] -> [((i4) mod 64)] }]"
                            permutable: 1
                            coincident: [ 1, 1 ]
          - filter: "[Nb, C, H, W, F1, F2] -> { O_store[n, ty, tx, g, i2, j2] }"
            child:
              schedule: "[Nb, C, H, W, F1, F2] -> [{ O_store[i0, i1, i2, i3, i4, i5] -> [(i3)] }, { O_store[i0, i1, i2, i3, i4, i5] -> [(i4)] }, { O_store[i0, i1, i2, i3, i4, i5] -> [(i5)] }]"
              permutable: 1
              coincident: [ 1, 1, 1 ]
