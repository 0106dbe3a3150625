domain: "[N, M] -> { E[i, j] : 0 <= i < N and 0 <= j < M }"
child:
  mark: "kernel:0"
  child:
    mark: "gpu_blocks:2"
    child:
      schedule: "[N, M] -> [{ E[i, j] -> [(floor((i)/32))] }, { E[i, j] -> [(floor((j)/8))] }]"
      permutable: 1
      coincident: [ 1, 1 ]
      options: "{ atomic[i0] : 0 <= i0 <= 1 }"
      child:
        mark: "gpu_threads:32,8"
        child:
          schedule: "[N, M] -> [{ E[i, j] -> [((i) mod 32)] }, { E[i, j] -> [((j) mod 8)] }]"
          permutable: 1
          coincident: [ 1, 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 1 }"
