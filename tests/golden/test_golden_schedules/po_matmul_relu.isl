domain: "[N, K, M] -> { C_init[i, j] : 0 <= i < N and 0 <= j < M and K > 0;
                        C_update[i, j, k] : 0 <= i < N and 0 <= j < M and 0 <= k < K;
                        D[i, j] : 0 <= i < N and 0 <= j < M and K > 0 }"
child:
  sequence:
  - filter: "{ C_init[i, j]; C_update[i, j, k] }"
    child:
      schedule: "[N, K, M] -> [{ C_init[i, j] -> [(i)]; C_update[i, j, k] -> [(i)] },
                               { C_init[i, j] -> [(j)]; C_update[i, j, k] -> [(j)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "{ C_init[i, j] }"
        - filter: "{ C_update[i, j, k] }"
          child:
            schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [(k)] }]"
  - filter: "{ D[i, j] }"
    child:
      schedule: "[N, K, M] -> [{ D[i, j] -> [(i)] }, { D[i, j] -> [(j)] }]"
      permutable: 1
