domain: "[N] -> { S[i] : N > 0 and 0 <= i < N }"
child:
  mark: "kernel:0"
  child:
    mark: "gpu_blocks:0"
    child:
      schedule: "[N] -> [{ S[i] -> [(floor((i)/256))] }]"
      permutable: 1
      coincident: [ 1 ]
      options: "{ atomic[0] }"
      child:
        mark: "gpu_threads:0"
        child:
          schedule: "[N] -> [{ S[i] -> [((i) mod 256)] }]"
          permutable: 1
          coincident: [ 1 ]
          options: "{ atomic[0] }"
