/* Floyd-Warshall: row k and column k carry the step's dependences (scop-split makes
   i < k, i = k, i > k pieces, and j likewise inside each). */
void floyd_like(int n, int path[n][n]) {
  int k, i, j;
#pragma scop
  for (k = 0; k < n; k++)
    for (i = 0; i < n; i++)
      for (j = 0; j < n; j++)
        path[i][j] = path[i][j] < path[i][k] + path[k][j] ? path[i][j]
                                                          : path[i][k] + path[k][j];
#pragma endscop
}
