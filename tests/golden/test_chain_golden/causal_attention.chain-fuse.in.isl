domain: "[B, M, K, L, N] -> { Sc[b, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= b < B and 0 <= i < M and 0 <= j < L; T_update[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < L and 0 <= k < K; S_sum_update[i0, i1, r1] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= r1 < L; O_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N; S_max_update[i0, i1, r0] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= r0 < L; T_init[n, i, j] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < L; S_max_init[i0, i1] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M; S_sum_init[i0, i1] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M; S_exp[i0, i1, i2] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= i2 < L; S[i0, i1, i2] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= i0 < B and 0 <= i1 < M and 0 <= i2 < L; O_update[n, i, j, k] : B > 0 and M > 0 and K > 0 and L > 0 and N > 0 and 0 <= n < B and 0 <= i < M and 0 <= j < N and 0 <= k < L }"
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
  - filter: "[B, M, K, L, N] -> { Sc[b, i, j] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ Sc[b, i, j] -> [(b)] }, { Sc[b, i, j] -> [(i)] }, { Sc[b, i, j] -> [(j)] }]"
      permutable: 1
  - filter: "[B, M, K, L, N] -> { S_max_update[i0, i1, r0]; S_max_init[i0, i1] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ S_max_update[i0, i1, r0] -> [(i0)]; S_max_init[i0, i1] -> [(i0)] }, { S_max_update[i0, i1, r0] -> [(i1)]; S_max_init[i0, i1] -> [(i1)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[B, M, K, L, N] -> { S_max_init[i0, i1] }"
        - filter: "[B, M, K, L, N] -> { S_max_update[i0, i1, r0] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ S_max_update[i0, i1, r0] -> [(r0)] }]"
  - filter: "[B, M, K, L, N] -> { S_exp[i0, i1, i2] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ S_exp[i0, i1, i2] -> [(i0)] }, { S_exp[i0, i1, i2] -> [(i1)] }, { S_exp[i0, i1, i2] -> [(i2)] }]"
      permutable: 1
  - filter: "[B, M, K, L, N] -> { S_sum_update[i0, i1, r1]; S_sum_init[i0, i1] }"
    child:
      schedule: "[B, M, K, L, N] -> [{ S_sum_init[i0, i1] -> [(i0)]; S_sum_update[i0, i1, r1] -> [(i0)] }, { S_sum_init[i0, i1] -> [(i1)]; S_sum_update[i0, i1, r1] -> [(i1)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "[B, M, K, L, N] -> { S_sum_init[i0, i1] }"
        - filter: "[B, M, K, L, N] -> { S_sum_update[i0, i1, r1] }"
          child:
            schedule: "[B, M, K, L, N] -> [{ S_sum_update[i0, i1, r1] -> [(r1)] }]"
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
