domain: "[Nb, C, H, W, F1, F2] -> { R[i0, i1, i2, i3] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= i0 < Nb and 0 <= i1 < F1 and 0 <= i2 < H and 0 <= i3 < W; O_update[n, f, y, z, rc, rh, rw] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and 0 <= f < F2 and 0 <= y < H and 0 <= z < W and 0 <= rc < F1 and 0 <= rh <= 2 and 0 <= rw <= 2; T_init[n, f, y, z] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and 0 <= f < F1 and 0 <= y < H and 0 <= z < W; O_init[n, f, y, z] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and 0 <= f < F2 and 0 <= y < H and 0 <= z < W; T_update[n, f, y, z, rc, rh = 0, rw = 0] : Nb > 0 and C > 0 and H > 0 and W > 0 and F1 > 0 and F2 > 0 and 0 <= n < Nb and 0 <= f < F1 and 0 <= y < H and 0 <= z < W and 0 <= rc < C }"
child:
  sequence:
  - filter: "[Nb, C, H, W, F1, F2] -> { T_init[n, f, y, z]; T_update[n, f, y, z, rc, rh, rw] }"
    child:
      schedule: "[Nb, C, H, W, F1, F2] -> [{ T_update[n, f, y, z, rc, rh, rw] -> [(n)]; T_init[n, f, y, z] -> [(n)] }, { T_update[n, f, y, z, rc, rh, rw] -> [(f)]; T_init[n, f, y, z] -> [(f)] }, { T_update[n, f, y, z, rc, rh, rw] -> [(y)]; T_init[n, f, y, z] -> [(y)] }, { T_update[n, f, y, z, rc, rh, rw] -> [(z)]; T_init[n, f, y, z] -> [(z)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[Nb, C, H, W, F1, F2] -> { T_init[n, f, y, z] }"
        - filter: "[Nb, C, H, W, F1, F2] -> { T_update[n, f, y, z, rc, rh, rw] }"
          child:
            schedule: "[Nb, C, H, W, F1, F2] -> [{ T_update[n, f, y, z, rc, rh, rw] -> [(rc)] }, { T_update[n, f, y, z, rc, rh, rw] -> [(rh)] }, { T_update[n, f, y, z, rc, rh, rw] -> [(rw)] }]"
  - filter: "[Nb, C, H, W, F1, F2] -> { R[i0, i1, i2, i3] }"
    child:
      schedule: "[Nb, C, H, W, F1, F2] -> [{ R[i0, i1, i2, i3] -> [(i0)] }, { R[i0, i1, i2, i3] -> [(i1)] }, { R[i0, i1, i2, i3] -> [(i2)] }, { R[i0, i1, i2, i3] -> [(i3)] }]"
      permutable: 1
  - filter: "[Nb, C, H, W, F1, F2] -> { O_update[n, f, y, z, rc, rh, rw]; O_init[n, f, y, z] }"
    child:
      schedule: "[Nb, C, H, W, F1, F2] -> [{ O_init[n, f, y, z] -> [(n)]; O_update[n, f, y, z, rc, rh, rw] -> [(n)] }, { O_init[n, f, y, z] -> [(f)]; O_update[n, f, y, z, rc, rh, rw] -> [(f)] }, { O_init[n, f, y, z] -> [(y)]; O_update[n, f, y, z, rc, rh, rw] -> [(y)] }, { O_init[n, f, y, z] -> [(z)]; O_update[n, f, y, z, rc, rh, rw] -> [(z)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[Nb, C, H, W, F1, F2] -> { O_init[n, f, y, z] }"
        - filter: "[Nb, C, H, W, F1, F2] -> { O_update[n, f, y, z, rc, rh, rw] }"
          child:
            schedule: "[Nb, C, H, W, F1, F2] -> [{ O_update[n, f, y, z, rc, rh, rw] -> [(rc)] }, { O_update[n, f, y, z, rc, rh, rw] -> [(rh)] }, { O_update[n, f, y, z, rc, rh, rw] -> [(rw)] }]"
