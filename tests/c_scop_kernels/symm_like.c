/* A symmetric-matrix product with a scalar accumulator: the row loop carries a
   dependence from the final update back to the column sweep (so only the column loop
   may be distributed), and the innermost loop walks columns of C and B. */
void symm_like(int m, int n, double C[m][n], double A[m][m], double B[m][n]) {
  int i, j, k;
  double acc;
#pragma scop
  for (i = 0; i < m; i++)
    for (j = 0; j < n; j++) {
      acc = 0.0;
      for (k = 0; k < i; k++) {
        C[k][j] += 0.75 * B[i][j] * A[i][k];
        acc += B[k][j] * A[i][k];
      }
      C[i][j] = 0.5 * C[i][j] + 0.75 * B[i][j] * A[i][i] + 0.75 * acc;
    }
#pragma endscop
}
