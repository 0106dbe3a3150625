domain: "[N] -> { B[i] : 0 <= i < N; C[i] : 0 <= i < N }"
child:
  schedule: "[N] -> [{ B[i] -> [(i)]; C[i] -> [(i)] }]"
  permutable: 1
  child:
    sequence:
    - filter: "{ B[i] }"
    - filter: "{ C[i] }"
