{ domain: "[N, M] -> { Y[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M }", child: { schedule: "[N, M] -> [{ Y[i, j] -> [(i)] }, { Y[i, j] -> [(j)] }]", permutable: 1 } }
