domain: "[N, M] -> { E[i, j] : 0 <= i < N and 0 <= j < M }"
child:
  schedule: "[N, M] -> [{ E[i, j] -> [(i)] }, { E[i, j] -> [(j)] }]"
  permutable: 1
