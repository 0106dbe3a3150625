/* PolyBench's Cholesky, row by row (left-looking): the factor overwrites A's lower
   triangle. */
#include <math.h>
void cholesky_like(int n, double A[n][n]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < n; i++) {
    for (j = 0; j < i; j++) {
      for (k = 0; k < j; k++)
        A[i][j] -= A[i][k] * A[j][k];
      A[i][j] /= A[j][j];
    }
    for (k = 0; k < i; k++)
      A[i][i] -= A[i][k] * A[i][k];
    A[i][i] = sqrt(A[i][i]);
  }
#pragma endscop
}
