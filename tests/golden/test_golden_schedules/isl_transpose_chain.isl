domain: "[N] -> { B[i, j] : 0 <= i < N and 0 <= j < N; C[i, j] : 0 <= i < N and 0 <= j < N }"
child:
  schedule: "[N] -> [{ B[i, j] -> [(j)]; C[i, j] -> [(i)] }, { B[i, j] -> [(i)]; C[i, j] -> [(j)] }]"
  permutable: 1
  coincident: [ 1, 1 ]
  child:
    sequence:
    - filter: "{ B[i, j] }"
    - filter: "{ C[i, j] }"
