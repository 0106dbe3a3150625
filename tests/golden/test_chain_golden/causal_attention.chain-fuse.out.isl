domain: "[B, M, K, L, N] -> { O_update_online[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N and 0 <= k < L; Sc[b, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= b < B and 0 <= i < M and 0 <= j < L; S_max_save[i0, i1, lt] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and lt >= 0 and 64lt < L; S_sum_rescale[i0, i1, lt] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and lt >= 0 and 64lt < L; T_update[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < L and 0 <= k < K; S_sum_update[i0, i1, r1] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= r1 < L; O_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N; O_normalise[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N; S_max_update[i0, i1, r0] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= r0 < L; T_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < L; S_exp_online[i0, i1, i2] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= i2 < L; S_max_init[i0, i1] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M; S_sum_init[i0, i1] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M; O_rescale[n, i, j, lt] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N and lt >= 0 and 64lt < L; S_max_rescale[i0, i1, lt] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and lt >= 0 and 64lt < L }"
child:
  mark: "chain_fused:0"
  child:
    mark: "cpu_parallel"
    child:
      schedule: "[B, M, K, L, N] -> [{ O_update_online[i0, i1, i2, i3] -> [(i0)]; Sc[i0, i1, i2] -> [(i0)]; S_max_save[i0, i1, i2] -> [(i0)]; S_sum_rescale[i0, i1, i2] -> [(i0)]; T_update[i0, i1, i2, i3] -> [(i0)]; S_sum_update[i0, i1, i2] -> [(i0)]; O_init[i0, i1, i2] -> [(i0)]; O_normalise[i0, i1, i2] -> [(i0)]; S_max_update[i0, i1, i2] -> [(i0)]; T_init[i0, i1, i2] -> [(i0)]; S_exp_online[i0, i1, i2] -> [(i0)]; S_max_init[i0, i1] -> [(i0)]; S_sum_init[i0, i1] -> [(i0)]; O_rescale[i0, i1, i2, i3] -> [(i0)]; S_max_rescale[i0, i1, i2] -> [(i0)] }, { O_update_online[i0, i1, i2, i3] -> [(floor((i1)/72))]; Sc[i0, i1, i2] -> [(floor((i1)/72))]; S_max_save[i0, i1, i2] -> [(floor((i1)/72))]; S_sum_rescale[i0, i1, i2] -> [(floor((i1)/72))]; T_update[i0, i1, i2, i3] -> [(floor((i1)/72))]; S_sum_update[i0, i1, i2] -> [(floor((i1)/72))]; O_init[i0, i1, i2] -> [(floor((i1)/72))]; O_normalise[i0, i1, i2] -> [(floor((i1)/72))]; S_max_update[i0, i1, i2] -> [(floor((i1)/72))]; T_init[i0, i1, i2] -> [(floor((i1)/72))]; S_exp_online[i0, i1, i2] -> [(floor((i1)/72))]; S_max_init[i0, i1] -> [(floor((i1)/72))]; S_sum_init[i0, i1] -> [(floor((i1)/72))]; O_rescale[i0, i1, i2, i3] -> [(floor((i1)/72))]; S_max_rescale[i0, i1, i2] -> [(floor((i1)/72))] }]"
      permutable: 1
      coincident: [ 1, 1 ]
      child:
        mark: "cpu_local:1"
        child:
          sequence:
          - filter: "[B, M, K, L, N] -> { S_max_init[i0, i1]; S_sum_init[i0, i1] }"
            child:
              schedule: "[B, M, K, L, N] -> [{ S_sum_init[i0, i1] -> [(i1)]; S_max_init[i0, i1] -> [(i1)] }]"
              permutable: 1
              coincident: [ 1 ]
          - filter: "[B, M, K, L, N] -> { O_init[n, i, j] }"
            child:
              schedule: "[B, M, K, L, N] -> [{ O_init[i0, i1, i2] -> [(i1)] }, { O_init[i0, i1, i2] -> [(i2)] }]"
              permutable: 1
              coincident: [ 1, 1 ]
          - filter: "[B, M, K, L, N] -> { O_update_online[n, i, j, k]; Sc[b, i, j]; S_max_save[i0, i1, lt]; S_sum_rescale[i0, i1, lt]; T_update[n, i, j, k]; S_sum_update[i0, i1, r1]; S_max_update[i0, i1, r0]; T_init[n, i, j]; S_exp_online[i0, i1, i2]; O_rescale[n, i, j, lt]; S_max_rescale[i0, i1, lt] }"
            child:
              schedule: "[B, M, K, L, N] -> [{ T_init[i0, i1, i2] -> [(floor((i2)/64))]; S_exp_online[i0, i1, i2] -> [(floor((i2)/64))]; O_rescale[i0, i1, i2, i3] -> [(i3)]; S_max_rescale[i0, i1, i2] -> [(i2)]; S_sum_rescale[i0, i1, i2] -> [(i2)]; S_max_save[i0, i1, i2] -> [(i2)]; O_update_online[i0, i1, i2, i3] -> [(floor((i3)/64))]; S_max_update[i0, i1, i2] -> [(floor((i2)/64))]; T_update[i0, i1, i2, i3] -> [(floor((i2)/64))]; Sc[i0, i1, i2] -> [(floor((i2)/64))]; S_sum_update[i0, i1, i2] -> [(floor((i2)/64))] }]"
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
                  - filter: "[B, M, K, L, N] -> { Sc[b, i, j]; S_max_save[i0, i1, lt]; S_sum_rescale[i0, i1, lt]; S_sum_update[i0, i1, r1]; S_max_update[i0, i1, r0]; S_exp_online[i0, i1, i2]; S_max_rescale[i0, i1, lt] }"
                    child:
                      schedule: "[B, M, K, L, N] -> [{ S_exp_online[i0, i1, i2] -> [(i1)]; S_max_rescale[i0, i1, i2] -> [(i1)]; S_sum_rescale[i0, i1, i2] -> [(i1)]; S_max_save[i0, i1, i2] -> [(i1)]; S_max_update[i0, i1, i2] -> [(i1)]; S_sum_update[i0, i1, i2] -> [(i1)]; Sc[i0, i1, i2] -> [(i1)] }]"
                      permutable: 1
                      coincident: [ 1 ]
                      child:
                        sequence:
                        - filter: "[B, M, K, L, N] -> { Sc[b, i, j] }"
                          child:
                            schedule: "[B, M, K, L, N] -> [{ Sc[i0, i1, i2] -> [(i2)] }]"
                            permutable: 1
                            coincident: [ 1 ]
                        - filter: "[B, M, K, L, N] -> { S_max_save[i0, i1, lt] }"
                        - filter: "[B, M, K, L, N] -> { S_max_update[i0, i1, r0] }"
                          child:
                            schedule: "[B, M, K, L, N] -> [{ S_max_update[i0, i1, i2] -> [(i2)] }]"
                            permutable: 1
                        - filter: "[B, M, K, L, N] -> { S_max_rescale[i0, i1, lt] }"
                        - filter: "[B, M, K, L, N] -> { S_sum_rescale[i0, i1, lt] }"
                        - filter: "[B, M, K, L, N] -> { S_sum_update[i0, i1, r1]; S_exp_online[i0, i1, i2] }"
                          child:
                            schedule: "[B, M, K, L, N] -> [{ S_exp_online[i0, i1, i2] -> [(i2)]; S_sum_update[i0, i1, i2] -> [(i2)] }]"
                            permutable: 1
                            child:
                              sequence:
                              - filter: "[B, M, K, L, N] -> { S_exp_online[i0, i1, i2] }"
                              - filter: "[B, M, K, L, N] -> { S_sum_update[i0, i1, r1] }"
                  - filter: "[B, M, K, L, N] -> { O_update_online[n, i, j, k]; O_rescale[n, i, j, lt] }"
                    child:
                      schedule: "[B, M, K, L, N] -> [{ O_update_online[i0, i1, i2, i3] -> [(floor((i1)/6) - 12*floor((i1)/72))]; O_rescale[i0, i1, i2, i3] -> [(floor((i1)/6) - 12*floor((i1)/72))] }, { O_update_online[i0, i1, i2, i3] -> [(floor((i2)/64))]; O_rescale[i0, i1, i2, i3] -> [(floor((i2)/64))] }]"
                      permutable: 1
                      coincident: [ 1, 1 ]
                      options: "[B, M, K, L, N] -> { isolate[[i0, i1, i2] -> [i3, i4]] : K > 0 and 0 <= i0 < B and i1 >= 0 and i2 >= 0 and 64i2 < L and 0 <= i3 <= 11 and 6i3 <= -6 + M - 72i1 and i4 >= 0 and 64i4 <= -64 + N }"
                      child:
                        sequence:
                        - filter: "[B, M, K, L, N] -> { O_rescale[n, i, j, lt] }"
                          child:
                            schedule: "[B, M, K, L, N] -> [{ O_rescale[i0, i1, i2, i3] -> [((i1) mod 6)] }, { O_rescale[i0, i1, i2, i3] -> [((i2) mod 64)] }]"
                            permutable: 1
                            coincident: [ 1, 1 ]
                        - filter: "[B, M, K, L, N] -> { O_update_online[n, i, j, k] }"
                          child:
                            mark: "cpu_microkernel"
                            child:
                              schedule: "[B, M, K, L, N] -> [{ O_update_online[i0, i1, i2, i3] -> [((i3) mod 64)] }]"
                              permutable: 1
                              child:
                                schedule: "[B, M, K, L, N] -> [{ O_update_online[i0, i1, i2, i3] -> [((i1) mod 6)] }, { O_update_online[i0, i1, i2, i3] -> [((i2) mod 64)] }]"
                                permutable: 1
                                coincident: [ 1, 1 ]
          - filter: "[B, M, K, L, N] -> { O_normalise[n, i, j] }"
            child:
              schedule: "[B, M, K, L, N] -> [{ O_normalise[i0, i1, i2] -> [(i1)] }, { O_normalise[i0, i1, i2] -> [(i2)] }]"
              permutable: 1
              coincident: [ 1, 1 ]
