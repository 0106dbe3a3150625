domain: "[N, K, M] -> { C_init[i, j] : 0 <= i < N and 0 <= j < M and K > 0;
                        C_update[i, j, k] : 0 <= i < N and 0 <= j < M and 0 <= k < K;
                        D[i, j] : 0 <= i < N and 0 <= j < M and K > 0 }"
child:
  schedule: "[N, K, M] -> [{ C_init[i, j] -> [(i)]; C_update[i, j, k] -> [(i)]; D[i, j] -> [(i)] },
                           { C_init[i, j] -> [(j)]; C_update[i, j, k] -> [(j)]; D[i, j] -> [(j)] },
                           { C_init[i, j] -> [(0)]; C_update[i, j, k] -> [(k)]; D[i, j] -> [(K)] }]"
  permutable: 1
  coincident: [ 1, 1, 0 ]
  child:
    set:
    - filter: "{ C_init[i, j]; C_update[i, j, k] }"
      child:
        sequence:
        - filter: "{ C_init[i, j] }"
        - filter: "{ C_update[i, j, k] }"
    - filter: "{ D[i, j] }"
