/* A Gauss-Seidel sweep in place: every point reads neighbours of this and the previous
   sweep, so only a wavefront of tiles runs in parallel. */
void seidel_like(int tsteps, int n, double A[n][n]) {
  int t, i, j;
#pragma scop
  for (t = 0; t <= tsteps - 1; t++)
    for (i = 1; i <= n - 2; i++)
      for (j = 1; j <= n - 2; j++)
        A[i][j] = (A[i-1][j] + A[i][j-1] + A[i][j] + A[i][j+1] + A[i+1][j]) / 5.0;
#pragma endscop
}
