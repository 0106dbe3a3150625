/* PolyBench's syrk: both operands read A (A[i][k] and its transpose A[j][k]) on the
   triangle j <= i; each reference packed on its own. */
void syrk_aa(int n, int m, double C[n][n], double A[n][m]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < n; i++) {
    for (j = 0; j <= i; j++)
      C[i][j] *= 0.5;
    for (k = 0; k < m; k++)
      for (j = 0; j <= i; j++)
        C[i][j] += 1.5 * A[i][k] * A[j][k];
  }
#pragma endscop
}
