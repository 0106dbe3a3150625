/* An update of the LU form over the whole k range: row i reads rows k > i before
   they are updated, so no right-looking order is legal (scop-factor keeps the C
   order). */
void lu_nofactor(int n, double A[n][n]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < n; i++)
    for (j = 0; j < n; j++)
      for (k = 0; k < n; k++)
        A[i][j] -= A[i][k] * A[k][j];
#pragma endscop
}
