/* adi-like sweeps: rows in parallel, a division chain along each row reading u down a
   column; then a column recurrence with the columns in parallel (deriche-like). */
void sweep_like(int n, double u[n][n], double p[n][n], double y[n][n]) {
  int i, j;
#pragma scop
  for (i = 1; i < n; i++) {
    p[i][0] = u[0][i];
    for (j = 1; j < n; j++)
      p[i][j] = u[j][i] / (p[i][j - 1] + 2.0);
  }
  for (j = 0; j < n; j++) {
    y[0][j] = u[0][j];
    for (i = 1; i < n; i++)
      y[i][j] = 0.5 * u[i][j] - 0.25 * y[i - 1][j];
  }
#pragma endscop
}
