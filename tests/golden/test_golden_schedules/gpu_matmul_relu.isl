domain: "[N, K, M] -> { C_init[i, j] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M; D[i, j] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M; C_update[i, j, k] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M and 0 <= k < K }"
child:
  sequence:
  - filter: "[N, K, M] -> { C_init[i, j]; C_update[i, j, k] }"
    child:
      mark: "kernel:0"
      child:
        mark: "gpu_blocks:0"
        child:
          schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((i)/16))]; C_update[i, j, k] -> [(floor((i)/16))] }, { C_init[i, j] -> [(floor((j)/16))]; C_update[i, j, k] -> [(floor((j)/16))] }]"
          permutable: 1
          coincident: [ 1, 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 1 }"
          child:
            mark: "gpu_threads:0"
            child:
              schedule: "[N, K, M] -> [{ C_init[i, j] -> [((i) mod 16)]; C_update[i, j, k] -> [((i) mod 16)] }, { C_init[i, j] -> [((j) mod 16)]; C_update[i, j, k] -> [((j) mod 16)] }]"
              permutable: 1
              coincident: [ 1, 1 ]
              options: "{ atomic[i0] : 0 <= i0 <= 1 }"
              child:
                sequence:
                - filter: "[N, K, M] -> { C_init[i, j] }"
                - filter: "[N, K, M] -> { C_update[i, j, k] }"
                  child:
                    schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [(k)] }]"
  - filter: "[N, K, M] -> { D[i, j] }"
    child:
      mark: "kernel:1"
      child:
        mark: "gpu_blocks:1"
        child:
          schedule: "[N, K, M] -> [{ D[i, j] -> [(floor((i)/16))] }, { D[i, j] -> [(floor((j)/16))] }]"
          permutable: 1
          coincident: [ 1, 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 1 }"
          child:
            mark: "gpu_threads:1"
            child:
              schedule: "[N, K, M] -> [{ D[i, j] -> [((i) mod 16)] }, { D[i, j] -> [((j) mod 16)] }]"
              permutable: 1
              coincident: [ 1, 1 ]
              options: "{ atomic[i0] : 0 <= i0 <= 1 }"
