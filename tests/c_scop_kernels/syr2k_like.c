/* PolyBench's syr2k: a sum of two products whose operands each read A and B, on the
   triangle j <= i; each of the four references packed on its own. */
void syr2k_like(int n, int m, double C[n][n], double A[n][m], double B[n][m]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < n; i++) {
    for (j = 0; j <= i; j++)
      C[i][j] *= 0.5;
    for (k = 0; k < m; k++)
      for (j = 0; j <= i; j++)
        C[i][j] += A[j][k] * 1.5 * B[i][k] + B[j][k] * 1.5 * A[i][k];
  }
#pragma endscop
}
