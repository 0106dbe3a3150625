/* A batched product without an init (accumulates into C as given). */
void batch_gemm(int nb, int ni, int nj, int nk, double C[nb][ni][nj], double A[nb][ni][nk],
                double B[nk][nj]) {
#pragma scop
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < ni; i++)
      for (int j = 0; j < nj; j++)
        for (int k = 0; k < nk; k++)
          C[b][i][j] += A[b][i][k] * B[k][j];
#pragma endscop
}
