/* A product whose reduction range depends on the output row (k <= i, as trmm's): the
   k tiles would not start every element's sum in the first one, so no micro-kernel. */
void gemm_ktri(int ni, int nj, double C[ni][nj], double A[ni][ni], double B[ni][nj]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < ni; i++)
    for (k = 0; k <= i; k++)
      for (j = 0; j < nj; j++)
        C[i][j] += A[i][k] * B[k][j];
#pragma endscop
}
