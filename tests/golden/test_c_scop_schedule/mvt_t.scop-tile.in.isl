{ domain: "[n] -> { S_0[i, j] : 0 <= i < n and 0 <= j < n }", child: { schedule: "[{ S_0[i, j] -> [(i)] }, { S_0[i, j] -> [(j)] }]", permutable: 1 } }
