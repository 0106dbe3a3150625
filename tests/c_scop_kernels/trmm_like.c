/* A triangular product in place: the row loop carries dependences, the column loop
   (the second member of the same band) is parallel, and a sequence lies below. */
void trmm_like(int m, int n, double A[m][m], double B[m][n]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < m; i++)
    for (j = 0; j < n; j++) {
      for (k = i + 1; k < m; k++)
        B[i][j] += A[k][i] * B[k][j];
      B[i][j] = 1.5 * B[i][j];
    }
#pragma endscop
}
