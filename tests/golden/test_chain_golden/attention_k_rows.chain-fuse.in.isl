domain: "[B, M, K, L, N] -> { T_update[b, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= b < B and 0 <= i < M and 0 <= j < L and 0 <= k < K; S_sum_update[i0, i1, r3] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= r3 < L; O_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N; S_max_update[i0, i1, r2] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= r2 < L; T_init[b, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= b < B and 0 <= i < M and 0 <= j < L; S_max_init[i0, i1] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M; S_sum_init[i0, i1] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M; S_exp[i0, i1, i2] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= i2 < L; S[i0, i1, i2] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= i2 < L; O_update[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N and 0 <= k < L }"
child:
  sequence:
  - filter: "[B, M, K, L, N] -> { T_update[b, i, j, k]; T_init[b, i, j] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ T_init[b, i, j] -> [(b)]; T_update[b, i, j, k] -> [(b)] }, { T_init[b, i, j] -> [(i)]; T_update[b, i, j, k] -> [(i)] }, { T_init[b, i, j] -> [(j)]; T_update[b, i, j, k] -> [(j)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[B, M, K, L, N] -> { T_init[b, i, j] }"
        - filter: "[B, M, K, L, N] -> { T_update[b, i, j, k] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ T_update[b, i, j, k] -> [(k)] }]"
  - filter: "[B, M, K, L, N] -> { S_max_update[i0, i1, r2]; S_max_init[i0, i1] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ S_max_update[i0, i1, r2] -> [(i0)]; S_max_init[i0, i1] -> [(i0)] }, { S_max_update[i0, i1, r2] -> [(i1)]; S_max_init[i0, i1] -> [(i1)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[B, M, K, L, N] -> { S_max_init[i0, i1] }"
        - filter: "[B, M, K, L, N] -> { S_max_update[i0, i1, r2] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ S_max_update[i0, i1, r2] -> [(r2)] }]"
  - filter: "[B, M, K, L, N] -> { S_exp[i0, i1, i2] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ S_exp[i0, i1, i2] -> [(i0)] }, { S_exp[i0, i1, i2] -> [(i1)] }, { S_exp[i0, i1, i2] -> [(i2)] }]"
      permutable: 1
  - filter: "[B, M, K, L, N] -> { S_sum_update[i0, i1, r3]; S_sum_init[i0, i1] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ S_sum_init[i0, i1] -> [(i0)]; S_sum_update[i0, i1, r3] -> [(i0)] }, { S_sum_init[i0, i1] -> [(i1)]; S_sum_update[i0, i1, r3] -> [(i1)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[B, M, K, L, N] -> { S_sum_init[i0, i1] }"
        - filter: "[B, M, K, L, N] -> { S_sum_update[i0, i1, r3] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ S_sum_update[i0, i1, r3] -> [(r3)] }]"
  - filter: "[B, M, K, L, N] -> { S[i0, i1, i2] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ S[i0, i1, i2] -> [(i0)] }, { S[i0, i1, i2] -> [(i1)] }, { S[i0, i1, i2] -> [(i2)] }]"
      permutable: 1
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
