domain: "[M, K, L, N] -> { T_init[i, j] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < L; O_update[i, j, k] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < N and 0 <= k < L; T_update[i, j, k] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < L and 0 <= k < K; O_init[i, j] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < N; R[i, j] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < L }"
child:
  mark: "chain_fused:0"
  child:
    mark: "cpu_parallel"
    child:
      schedule: "[M, K, L, N] -> [{ T_init[i0, i1] -> [(floor((i0)/72))]; O_update[i0, i1, i2] -> [(floor((i0)/72))]; T_update[i0, i1, i2] -> [(floor((i0)/72))]; R[i0, i1] -> [(floor((i0)/72))]; O_init[i0, i1] -> [(floor((i0)/72))] }]"
      permutable: 1
      coincident: [ 1 ]
      child:
        sequence:
        - filter: "[M, K, L, N] -> { O_init[i, j] }"
          child:
            schedule: "[M, K, L, N] -> [{ O_init[i0, i1] -> [(i0)] }, { O_init[i0, i1] -> [(i1)] }]"
            permutable: 1
            coincident: [ 1, 1 ]
        - filter: "[M, K, L, N] -> { T_init[i, j]; O_update[i, j, k]; T_update[i, j, k]; R[i, j] }"
          child:
            schedule: "[M, K, L, N] -> [{ T_init[i0, i1] -> [(floor((i1)/64))]; O_update[i0, i1, i2] -> [(floor((i2)/64))]; T_update[i0, i1, i2] -> [(floor((i1)/64))]; R[i0, i1] -> [(floor((i1)/64))] }]"
            permutable: 1
            child:
              mark: "cpu_local:0"
              child:
                sequence:
                - filter: "[M, K, L, N] -> { T_init[i, j]; T_update[i, j, k] }"
                  child:
                    schedule: "[M, K, L, N] -> [{ T_init[i0, i1] -> [(floor((i0)/6) - 12*floor((i0)/72))]; T_update[i0, i1, i2] -> [(floor((i0)/6) - 12*floor((i0)/72))] }, { T_init[i0, i1] -> [(0)]; T_update[i0, i1, i2] -> [(0)] }]"
                    permutable: 1
                    coincident: [ 1, 1 ]
                    options: "[M, K, L, N] -> { isolate[[i0, i1] -> [i2, 0]] : K > 0 and N > 0 and i0 >= 0 and i1 >= 0 and 64i1 <= -64 + L and 0 <= i2 <= 11 and 6i2 <= -6 + M - 72i0 }"
                    child:
                      sequence:
                      - filter: "[M, K, L, N] -> { T_init[i, j] }"
                        child:
                          schedule: "[M, K, L, N] -> [{ T_init[i0, i1] -> [((i0) mod 6)] }, { T_init[i0, i1] -> [((i1) mod 64)] }]"
                          permutable: 1
                          coincident: [ 1, 1 ]
                      - filter: "[M, K, L, N] -> { T_update[i, j, k] }"
                        child:
                          mark: "cpu_microkernel"
                          child:
                            schedule: "[M, K, L, N] -> [{ T_update[i0, i1, i2] -> [(i2)] }]"
                            permutable: 1
                            child:
                              schedule: "[M, K, L, N] -> [{ T_update[i0, i1, i2] -> [((i0) mod 6)] }, { T_update[i0, i1, i2] -> [((i1) mod 64)] }]"
                              permutable: 1
                              coincident: [ 1, 1 ]
                - filter: "[M, K, L, N] -> { R[i, j] }"
                  child:
                    schedule: "[M, K, L, N] -> [{ R[i0, i1] -> [(i0)] }, { R[i0, i1] -> [(i1)] }]"
                    permutable: 1
                    coincident: [ 1, 1 ]
                - filter: "[M, K, L, N] -> { O_update[i, j, k] }"
                  child:
                    schedule: "[M, K, L, N] -> [{ O_update[i0, i1, i2] -> [(floor((i0)/6) - 12*floor((i0)/72))] }, { O_update[i0, i1, i2] -> [(floor((i1)/64))] }]"
                    permutable: 1
                    coincident: [ 1, 1 ]
                    options: "[M, K, L, N] -> { isolate[[i0, i1] -> [i2, i3]] : K > 0 and i0 >= 0 and i1 >= 0 and 64i1 < L and 0 <= i2 <= 11 and 6i2 <= -6 + M - 72i0 and i3 >= 0 and 64i3 <= -64 + N }"
                    child:
                      mark: "cpu_microkernel"
                      child:
                        schedule: "[M, K, L, N] -> [{ O_update[i0, i1, i2] -> [((i2) mod 64)] }]"
                        permutable: 1
                        child:
                          schedule: "[M, K, L, N] -> [{ O_update[i0, i1, i2] -> [((i0) mod 6)] }, { O_update[i0, i1, i2] -> [((i1) mod 64)] }]"
                          permutable: 1
                          coincident: [ 1, 1 ]
