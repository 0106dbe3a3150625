domain: "[N, K] -> { R_init[i] : 0 <= i < N and K > 0; R_update[i, k] : 0 <= i < N and 0 <= k < K }"
child:
  schedule: "[N, K] -> [{ R_init[i] -> [(i)]; R_update[i, k] -> [(i)] }]"
  permutable: 1
  child:
    sequence:
    - filter: "{ R_init[i] }"
    - filter: "{ R_update[i, k] }"
      child:
        schedule: "[N, K] -> [{ R_update[i, k] -> [(k)] }]"
