domain: "[N, M] -> { E[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M }"
child:
  mark: "kernel:0"
  child:
    mark: "gpu_blocks:0"
    child:
      schedule: "[N, M] -> [{ E[i, j] -> [(floor((i)/32))] }, { E[i, j] -> [(floor((j)/8))] }]"
      permutable: 1
      coincident: [ 1, 1 ]
      options: "{ atomic[i0] : 0 <= i0 <= 1 }"
      child:
        mark: "gpu_threads:0"
        child:
          schedule: "[N, M] -> [{ E[i, j] -> [((i) mod 32)] }, { E[i, j] -> [((j) mod 8)] }]"
          permutable: 1
          coincident: [ 1, 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 1 }"
