/* PolyBench's gemm loop order (i, k, j) with literal alpha/beta. */
void gemm_ikj(int ni, int nj, int nk, double C[ni][nj], double A[ni][nk], double B[nk][nj]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < ni; i++) {
    for (j = 0; j < nj; j++)
      C[i][j] *= 0.75;
    for (k = 0; k < nk; k++)
      for (j = 0; j < nj; j++)
        C[i][j] += 1.5 * A[i][k] * B[k][j];
  }
#pragma endscop
}
