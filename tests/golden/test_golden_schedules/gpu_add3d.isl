domain: "[N, M, K] -> { E[i, j, k] : N > 0 and M > 0 and K > 0 and 0 <= i < N and 0 <= j < M and 0 <= k < K }"
child:
  mark: "kernel:0"
  child:
    mark: "gpu_blocks:0"
    child:
      schedule: "[N, M, K] -> [{ E[i, j, k] -> [(floor((i)/4))] }, { E[i, j, k] -> [(floor((j)/8))] }, { E[i, j, k] -> [(floor((k)/8))] }]"
      permutable: 1
      coincident: [ 1, 1, 1 ]
      options: "{ atomic[i0] : 0 <= i0 <= 2 }"
      child:
        mark: "gpu_threads:0"
        child:
          schedule: "[N, M, K] -> [{ E[i, j, k] -> [((i) mod 4)] }, { E[i, j, k] -> [((j) mod 8)] }, { E[i, j, k] -> [((k) mod 8)] }]"
          permutable: 1
          coincident: [ 1, 1, 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 2 }"
