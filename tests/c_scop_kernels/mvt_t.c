/* mvt's second product: the innermost loop walks a column of A. */
void mvt_t(int n, double x2[n], double A[n][n], double y2[n]) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    for (j = 0; j < n; j++)
      x2[i] = x2[i] + A[j][i] * y2[j];
#pragma endscop
}
