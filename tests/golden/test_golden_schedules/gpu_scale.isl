domain: "[N] -> { S[i] : 0 <= i < N }"
child:
  mark: "kernel:0"
  child:
    mark: "gpu_blocks:1"
    child:
      schedule: "[N] -> [{ S[i] -> [(floor((i)/256))] }]"
      permutable: 1
      coincident: [ 1 ]
      options: "{ atomic[i0] : 0 <= i0 <= 0 }"
      child:
        mark: "gpu_threads:256"
        child:
          schedule: "[N] -> [{ S[i] -> [((i) mod 256)] }]"
          permutable: 1
          coincident: [ 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 0 }"
