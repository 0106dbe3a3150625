/* syrk's triangle (j <= i) and transposed operand B[j][k] (PolyBench's syrk with the
   second operand a different array): the micro-kernel on the full tiles below the
   diagonal, the generic nest on the diagonal ones. */
void syrk_ab(int n, int m, double C[n][n], double A[n][m], double B[n][m]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < n; i++) {
    for (j = 0; j <= i; j++)
      C[i][j] *= 0.5;
    for (k = 0; k < m; k++)
      for (j = 0; j <= i; j++)
        C[i][j] += 1.5 * A[i][k] * B[j][k];
  }
#pragma endscop
}
