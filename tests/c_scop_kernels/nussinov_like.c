/* An RNA-folding-style max-plus triangle (PolyBench's nussinov shape): rows from the
   bottom, every statement a max update of t[i][j]; the k loop reads t[k+1][j] down a
   column (scop-push runs it as row pushes). */
typedef char base;
#define best(a, b) ((a >= b) ? a : b)
#define pair(x, y) (((x) + (y)) == 3 ? 1 : 0)
void nussinov_like(int n, base seq[n], int t[n][n]) {
  int i, j, k;
#pragma scop
  for (i = n - 1; i >= 0; i--) {
    for (j = i + 1; j < n; j++) {
      if (j - 1 >= 0)
        t[i][j] = best(t[i][j], t[i][j - 1]);
      if (i + 1 < n)
        t[i][j] = best(t[i][j], t[i + 1][j]);
      if (j - 1 >= 0 && i + 1 < n) {
        if (i < j - 1)
          t[i][j] = best(t[i][j], t[i + 1][j - 1] + pair(seq[i], seq[j]));
        else
          t[i][j] = best(t[i][j], t[i + 1][j - 1]);
      }
      for (k = i + 1; k < j; k++)
        t[i][j] = best(t[i][j], t[i][k] + t[k + 1][j]);
    }
  }
#pragma endscop
}
