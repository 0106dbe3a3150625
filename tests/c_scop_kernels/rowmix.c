/* Each row of X replaced by its product with W through a one-row temporary t: the
   p loop holds an init and a column-strided reduction (distribution, then a tile
   with p innermost). */
void rowmix(int nr, int np, double X[nr][np], double W[np][np], double t[np]) {
  int r, p, s;
#pragma scop
  for (r = 0; r < nr; r++) {
    for (p = 0; p < np; p++) {
      t[p] = 0.0;
      for (s = 0; s < np; s++)
        t[p] = t[p] + X[r][s] * W[s][p];
    }
    for (p = 0; p < np; p++)
      X[r][p] = t[p];
  }
#pragma endscop
}
