domain: "[M, K, L, N] -> { T_init[i, j] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < L; O_update[i, j, k] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < N and 0 <= k < L; T_update[i, j, k] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < L and 0 <= k < K; O_init[i, j] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < N; R[i, j] : M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i < M and 0 <= j < L }"
child:
  sequence:
  - filter: "[M, K, L, N] -> { T_init[i, j]; T_update[i, j, k] }"
    child:
      schedule: "[M, K, L, N] -> [{ T_init[i, j] -> [(i)]; T_update[i, j, k] -> [(i)] }, { T_init[i, j] -> [(j)]; T_update[i, j, k] -> [(j)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[M, K, L, N] -> { T_init[i, j] }"
        - filter: "[M, K, L, N] -> { T_update[i, j, k] }"
          child:
            schedule: "[M, K, L, N] -> [{ T_update[i, j, k] -> [(k)] }]"
  - filter: "[M, K, L, N] -> { R[i, j] }"
    child:
      schedule: "[M, K, L, N] -> [{ R[i, j] -> [(i)] }, { R[i, j] -> [(j)] }]"
      permutable: 1
  - filter: "[M, K, L, N] -> { O_update[i, j, k]; O_init[i, j] }"
    child:
      schedule: "[M, K, L, N] -> [{ O_init[i, j] -> [(i)]; O_update[i, j, k] -> [(i)] }, { O_init[i, j] -> [(j)]; O_update[i, j, k] -> [(j)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[M, K, L, N] -> { O_init[i, j] }"
        - filter: "[M, K, L, N] -> { O_update[i, j, k] }"
          child:
            schedule: "[M, K, L, N] -> [{ O_update[i, j, k] -> [(k)] }]"
