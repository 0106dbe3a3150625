{ domain: "[n] -> { S_0[k, i, j] : 0 <= k < n and 0 <= i < n and 0 <= j < n }", child: { schedule: "[{ S_0[k, i, j] -> [(k)] }, { S_0[k, i, j] -> [(i)] }, { S_0[k, i, j] -> [(j)] }]" } }
