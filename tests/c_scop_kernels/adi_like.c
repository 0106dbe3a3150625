/* adi-like alternating sweeps: per time step a column sweep (a forward recurrence of
   p, q along j for every column i, then a back-substitution into v) and a row sweep
   (the same into u), both writing p and q.  The row sweep writes every p[i][j] /
   q[i][j] the column sweep wrote before anything else reads them: the column sweep's
   stores to p and q are dead (dead-store-contract). */
void adi_like(int tsteps, int n, double u[n][n], double v[n][n], double p[n][n],
              double q[n][n]) {
  int t, i, j;
#pragma scop
  for (t = 1; t <= tsteps; t++) {
    for (i = 1; i < n - 1; i++) {
      v[0][i] = 1.0;
      p[i][0] = 0.0;
      q[i][0] = v[0][i];
      for (j = 1; j < n - 1; j++) {
        p[i][j] = 0.25 / (0.5 * p[i][j - 1] + 1.5);
        q[i][j] = (0.3 * u[j][i - 1] + 0.4 * u[j][i] - 0.3 * u[j][i + 1]
                   + 0.5 * q[i][j - 1]) / (0.5 * p[i][j - 1] + 1.5);
      }
      v[n - 1][i] = 1.0;
      for (j = n - 2; j >= 1; j--)
        v[j][i] = p[i][j] * v[j + 1][i] + q[i][j];
    }
    for (i = 1; i < n - 1; i++) {
      u[i][0] = 1.0;
      p[i][0] = 0.0;
      q[i][0] = u[i][0];
      for (j = 1; j < n - 1; j++) {
        p[i][j] = 0.2 / (0.6 * p[i][j - 1] + 1.25);
        q[i][j] = (0.2 * v[i - 1][j] + 0.5 * v[i][j] - 0.1 * v[i + 1][j]
                   + 0.6 * q[i][j - 1]) / (0.6 * p[i][j - 1] + 1.25);
      }
      u[i][n - 1] = 1.0;
      for (j = n - 2; j >= 1; j--)
        u[i][j] = p[i][j] * u[i][j + 1] + q[i][j];
    }
  }
#pragma endscop
}
