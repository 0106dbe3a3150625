domain: "[B, M, K, L, N] -> { T_update[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < L and 0 <= k < K; O_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N; T_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < L; O_update[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N and 0 <= k < L }"
child:
  mark: "chain_fused:0"
  child:
    mark: "cpu_parallel"
    child:
      schedule: "[B, M, K, L, N] -> [{ T_init[i0, i1, i2] -> [(i0)]; T_update[i0, i1, i2, i3] -> [(i0)]; O_init[i0, i1, i2] -> [(i0)]; O_update[i0, i1, i2, i3] -> [(i0)] }, { T_init[i0, i1, i2] -> [(floor((i1)/72))]; T_update[i0, i1, i2, i3] -> [(floor((i1)/72))]; O_init[i0, i1, i2] -> [(floor((i1)/72))]; O_update[i0, i1, i2, i3] -> [(floor((i1)/72))] }]"
      permutable: 1
      coincident: [ 1, 1 ]
      child:
        sequence:
        - filter: "[B, M, K, L, N] -> { O_init[n, i, j] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ O_init[i0, i1, i2] -> [(i1)] }, { O_init[i0, i1, i2] -> [(i2)] }]"
            permutable: 1
            coincident: [ 1, 1 ]
        - filter: "[B, M, K, L, N] -> { T_update[n, i, j, k]; T_init[n, i, j]; O_update[n, i, j, k] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ T_init[i0, i1, i2] -> [(floor((i2)/64))]; T_update[i0, i1, i2, i3] -> [(floor((i2)/64))]; O_update[i0, i1, i2, i3] -> [(floor((i3)/64))] }]"
            permutable: 1
            child:
              mark: "cpu_local:0"
              child:
                sequence:
                - filter: "[B, M, K, L, N] -> { T_update[n, i, j, k]; T_init[n, i, j] }"
                  child:
                    schedule: "[B, M, K, L, N] -> [{ T_init[i0, i1, i2] -> [(floor((i1)/6) - 12*floor((i1)/72))]; T_update[i0, i1, i2, i3] -> [(floor((i1)/6) - 12*floor((i1)/72))] }, { T_init[i0, i1, i2] -> [(0)]; T_update[i0, i1, i2, i3] -> [(0)] }]"
                    permutable: 1
                    coincident: [ 1, 1 ]
                    options: "[B, M, K, L, N] -> { isolate[[i0, i1, i2] -> [i3, 0]] : K > 0 and N > 0 and 0 <= i0 < B and i1 >= 0 and i2 >= 0 and 64i2 <= -64 + L and 0 <= i3 <= 11 and 6i3 <= -6 + M - 72i1 }"
                    child:
                      sequence:
                      - filter: "[B, M, K, L, N] -> { T_init[n, i, j] }"
                        child:
                          schedule: "[B, M, K, L, N] -> [{ T_init[i0, i1, i2] -> [((i1) mod 6)] }, { T_init[i0, i1, i2] -> [((i2) mod 64)] }]"
                          permutable: 1
                          coincident: [ 1, 1 ]
                      - filter: "[B, M, K, L, N] -> { T_update[n, i, j, k] }"
                        child:
                          mark: "cpu_microkernel"
                          child:
                            schedule: "[B, M, K, L, N] -> [{ T_update[i0, i1, i2, i3] -> [(i3)] }]"
                            permutable: 1
                            child:
                              schedule: "[B, M, K, L, N] -> [{ T_update[i0, i1, i2, i3] -> [((i1) mod 6)] }, { T_update[i0, i1, i2, i3] -> [((i2) mod 64)] }]"
                              permutable: 1
                              coincident: [ 1, 1 ]
                - filter: "[B, M, K, L, N] -> { O_update[n, i, j, k] }"
                  child:
                    schedule: "[B, M, K, L, N] -> [{ O_update[i0, i1, i2, i3] -> [(floor((i1)/6) - 12*floor((i1)/72))] }, { O_update[i0, i1, i2, i3] -> [(floor((i2)/64))] }]"
                    permutable: 1
                    coincident: [ 1, 1 ]
                    options: "[B, M, K, L, N] -> { isolate[[i0, i1, i2] -> [i3, i4]] : K > 0 and 0 <= i0 < B and i1 >= 0 and i2 >= 0 and 64i2 < L and 0 <= i3 <= 11 and 6i3 <= -6 + M - 72i1 and i4 >= 0 and 64i4 <= -64 + N }"
                    child:
                      mark: "cpu_microkernel"
                      child:
                        schedule: "[B, M, K, L, N] -> [{ O_update[i0, i1, i2, i3] -> [((i3) mod 64)] }]"
                        permutable: 1
                        child:
                          schedule: "[B, M, K, L, N] -> [{ O_update[i0, i1, i2, i3] -> [((i1) mod 6)] }, { O_update[i0, i1, i2, i3] -> [((i2) mod 64)] }]"
                          permutable: 1
                          coincident: [ 1, 1 ]
