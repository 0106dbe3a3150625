/* x[i] -= L[i][j] * x[j] for every j: the loop reads the element it accumulates into
   (j = i), so it is not a vector reduction. */
void selfrow_like(int n, double L[n][n], double x[n]) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    for (j = 0; j < n; j++)
      x[i] -= L[i][j] * x[j];
#pragma endscop
}
