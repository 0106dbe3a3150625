/* Forward substitution: x[i] -= L[i][j] * x[j] for j < i reads x below the element it
   accumulates into (a vector reduction). */
void trisolv_like(int n, double L[n][n], double b[n], double x[n]) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++) {
    x[i] = b[i];
    for (j = 0; j < i; j++)
      x[i] -= L[i][j] * x[j];
    x[i] = x[i] / L[i][i];
  }
#pragma endscop
}
