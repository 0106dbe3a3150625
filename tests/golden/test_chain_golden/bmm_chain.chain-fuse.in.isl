domain: "[B, M, K, L, N] -> { T_update[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < L and 0 <= k < K; O_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N; T_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < L; O_update[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N and 0 <= k < L }"
child:
  sequence:
  - filter: "[B, M, K, L, N] -> { T_update[n, i, j, k]; T_init[n, i, j] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ T_init[n, i, j] -> [(n)]; T_update[n, i, j, k] -> [(n)] }, { T_init[n, i, j] -> [(i)]; T_update[n, i, j, k] -> [(i)] }, { T_init[n, i, j] -> [(j)]; T_update[n, i, j, k] -> [(j)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[B, M, K, L, N] -> { T_init[n, i, j] }"
        - filter: "[B, M, K, L, N] -> { T_update[n, i, j, k] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ T_update[n, i, j, k] -> [(k)] }]"
  - filter: "[B, M, K, L, N] -> { O_init[n, i, j]; O_update[n, i, j, k] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ O_update[n, i, j, k] -> [(n)]; O_init[n, i, j] -> [(n)] }, { O_update[n, i, j, k] -> [(i)]; O_init[n, i, j] -> [(i)] }, { O_update[n, i, j, k] -> [(j)]; O_init[n, i, j] -> [(j)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[B, M, K, L, N] -> { O_init[n, i, j] }"
        - filter: "[B, M, K, L, N] -> { O_update[n, i, j, k] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ O_update[n, i, j, k] -> [(k)] }]"
