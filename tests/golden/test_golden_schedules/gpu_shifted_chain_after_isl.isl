domain: "[N] -> { B[i] : 0 <= i < N; C[i] : 0 <= i < N }"
child:
  mark: "kernel:0"
  child:
    mark: "gpu_blocks:0"
    child:
      schedule: "[N] -> [{ B[i] -> [(i)]; C[i] -> [(i)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "{ B[i] }"
        - filter: "{ C[i] }"
