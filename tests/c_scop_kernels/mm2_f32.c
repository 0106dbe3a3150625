/* Two chained products in float (2mm's shape): tmp = A B, then D = 0.5 D + tmp C. */
void mm2_f32(int ni, int nj, int nk, int nl, float tmp[ni][nj], float A[ni][nk],
             float B[nk][nj], float C[nj][nl], float D[ni][nl]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < ni; i++)
    for (j = 0; j < nj; j++) {
      tmp[i][j] = 0.0f;
      for (k = 0; k < nk; ++k)
        tmp[i][j] += A[i][k] * B[k][j];
    }
  for (i = 0; i < ni; i++)
    for (j = 0; j < nl; j++) {
      D[i][j] *= 0.5f;
      for (k = 0; k < nj; ++k)
        D[i][j] += tmp[i][k] * C[k][j];
    }
#pragma endscop
}
