/* B transposed (syrk's access pattern): not the micro-kernel's form; stays a loop nest. */
void gemm_bt(int ni, int nj, int nk, double C[ni][nj], double A[ni][nk], double B[nj][nk]) {
#pragma scop
  for (int i = 0; i < ni; i++)
    for (int j = 0; j < nj; j++)
      for (int k = 0; k < nk; k++)
        C[i][j] += A[i][k] * B[j][k];
#pragma endscop
}
