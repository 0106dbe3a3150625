static __attribute__((noinline)) void pc_dot_tile5_1(int64_t c4, float* restrict matmul, const uint16_t* restrict B_pk1, const uint16_t* restrict A_pk2) {
  {
    __m512 acc1_5_v0;
    __m512 acc1_5_v1;
    __m512 acc1_5_v2;
    __m512 acc1_5_v3;
    __m512 acc1_5_v4;
    __m512 acc1_5_v5;
    __m512 acc1_5_v6;
    __m512 acc1_5_v7;
    __m512 acc1_5_v8;
    __m512 acc1_5_v9;
    __m512 acc1_5_v10;
    __m512 acc1_5_v11;
    __m512 acc1_5_v12;
    __m512 acc1_5_v13;
    __m512 acc1_5_v14;
    __m512 acc1_5_v15;
    __m512 acc1_5_v16;
    __m512 acc1_5_v17;
    __m512 acc1_5_v18;
    __m512 acc1_5_v19;
    {
      const int64_t ix11 = ((c4 * 64) + 16);
      const int64_t ix13 = ((c4 * 64) + 32);
      const int64_t ix15 = ((c4 * 64) + 48);
      const int64_t ix16 = ((c4 * 64) + 70);
      const int64_t ix17 = ((c4 * 64) + 86);
      const int64_t ix18 = ((c4 * 64) + 102);
      const int64_t ix19 = ((c4 * 64) + 118);
      const int64_t ix20 = ((c4 * 64) + 140);
      const int64_t ix21 = ((c4 * 64) + 156);
      const int64_t ix22 = ((c4 * 64) + 172);
      const int64_t ix23 = ((c4 * 64) + 188);
      const int64_t ix24 = ((c4 * 64) + 210);
      const int64_t ix25 = ((c4 * 64) + 226);
      const int64_t ix26 = ((c4 * 64) + 242);
      const int64_t ix27 = ((c4 * 64) + 258);
      const int64_t ix28 = ((c4 * 64) + 280);
      const int64_t ix29 = ((c4 * 64) + 296);
      const int64_t ix30 = ((c4 * 64) + 312);
      const int64_t ix31 = ((c4 * 64) + 328);
      const int64_t ix8 = pc_min_i64(63, ((-(c4 * 64)) + 69));
      const int64_t ix9 = (ix8 + 1);
      const int64_t ix10 = (ix8 - 15);
      const int64_t ix12 = (ix8 - 31);
      const int64_t ix14 = (ix8 - 47);
      {
        const pc_mask16 pc_m2001 = pc512_lane_range_ps(0, ix9);
        acc1_5_v0 = pc512_maskz_loadu_ps(pc_m2001, (matmul + (c4 * 64)));
      }
      {
        const pc_mask16 pc_m2002 = pc512_lane_range_ps(0, ix10);
        acc1_5_v1 = pc512_maskz_loadu_ps(pc_m2002, (matmul + ix11));
      }
      {
        const pc_mask16 pc_m2003 = pc512_lane_range_ps(0, ix12);
        acc1_5_v2 = pc512_maskz_loadu_ps(pc_m2003, (matmul + ix13));
      }
      {
        const pc_mask16 pc_m2004 = pc512_lane_range_ps(0, ix14);
        acc1_5_v3 = pc512_maskz_loadu_ps(pc_m2004, (matmul + ix15));
      }
      {
        const pc_mask16 pc_m2005 = pc512_lane_range_ps(0, ix9);
        acc1_5_v4 = pc512_maskz_loadu_ps(pc_m2005, (matmul + ix16));
      }
      {
        const pc_mask16 pc_m2006 = pc512_lane_range_ps(0, ix10);
        acc1_5_v5 = pc512_maskz_loadu_ps(pc_m2006, (matmul + ix17));
      }
      {
        const pc_mask16 pc_m2007 = pc512_lane_range_ps(0, ix12);
        acc1_5_v6 = pc512_maskz_loadu_ps(pc_m2007, (matmul + ix18));
      }
      {
        const pc_mask16 pc_m2008 = pc512_lane_range_ps(0, ix14);
        acc1_5_v7 = pc512_maskz_loadu_ps(pc_m2008, (matmul + ix19));
      }
      {
        const pc_mask16 pc_m2009 = pc512_lane_range_ps(0, ix9);
        acc1_5_v8 = pc512_maskz_loadu_ps(pc_m2009, (matmul + ix20));
      }
      {
        const pc_mask16 pc_m2010 = pc512_lane_range_ps(0, ix10);
        acc1_5_v9 = pc512_maskz_loadu_ps(pc_m2010, (matmul + ix21));
      }
      {
        const pc_mask16 pc_m2011 = pc512_lane_range_ps(0, ix12);
        acc1_5_v10 = pc512_maskz_loadu_ps(pc_m2011, (matmul + ix22));
      }
      {
        const pc_mask16 pc_m2012 = pc512_lane_range_ps(0, ix14);
        acc1_5_v11 = pc512_maskz_loadu_ps(pc_m2012, (matmul + ix23));
      }
      {
        const pc_mask16 pc_m2013 = pc512_lane_range_ps(0, ix9);
        acc1_5_v12 = pc512_maskz_loadu_ps(pc_m2013, (matmul + ix24));
      }
      {
        const pc_mask16 pc_m2014 = pc512_lane_range_ps(0, ix10);
        acc1_5_v13 = pc512_maskz_loadu_ps(pc_m2014, (matmul + ix25));
      }
      {
        const pc_mask16 pc_m2015 = pc512_lane_range_ps(0, ix12);
        acc1_5_v14 = pc512_maskz_loadu_ps(pc_m2015, (matmul + ix26));
      }
      {
        const pc_mask16 pc_m2016 = pc512_lane_range_ps(0, ix14);
        acc1_5_v15 = pc512_maskz_loadu_ps(pc_m2016, (matmul + ix27));
      }
      {
        const pc_mask16 pc_m2017 = pc512_lane_range_ps(0, ix9);
        acc1_5_v16 = pc512_maskz_loadu_ps(pc_m2017, (matmul + ix28));
      }
      {
        const pc_mask16 pc_m2018 = pc512_lane_range_ps(0, ix10);
        acc1_5_v17 = pc512_maskz_loadu_ps(pc_m2018, (matmul + ix29));
      }
      {
        const pc_mask16 pc_m2019 = pc512_lane_range_ps(0, ix12);
        acc1_5_v18 = pc512_maskz_loadu_ps(pc_m2019, (matmul + ix30));
      }
      {
        const pc_mask16 pc_m2020 = pc512_lane_range_ps(0, ix14);
        acc1_5_v19 = pc512_maskz_loadu_ps(pc_m2020, (matmul + ix31));
      }
      for (int64_t mk_p = 0; mk_p < 5; ++mk_p) {
        const int64_t ix32 = ((c4 * 640) + (mk_p * 128));
        {
          const __m512i mk1_y0 = _mm512_loadu_si512((const void*)(B_pk1 + ix32));
          {
            const __m512i mk1_y1 = _mm512_loadu_si512((const void*)(B_pk1 + (ix32 + 32)));
            {
              const __m512i mk1_y2 = _mm512_loadu_si512((const void*)(B_pk1 + (ix32 + 64)));
              {
                const __m512i mk1_y3 = _mm512_loadu_si512((const void*)(B_pk1 + (ix32 + 96)));
                {
                  const __m512i mk1_x0 = pc512_broadcast_group((const void*)(A_pk2 + (mk_p * 12)));
                  acc1_5_v0 = pc512_dpbf16_ps(acc1_5_v0, mk1_x0, mk1_y0);
                  acc1_5_v1 = pc512_dpbf16_ps(acc1_5_v1, mk1_x0, mk1_y1);
                  acc1_5_v2 = pc512_dpbf16_ps(acc1_5_v2, mk1_x0, mk1_y2);
                  acc1_5_v3 = pc512_dpbf16_ps(acc1_5_v3, mk1_x0, mk1_y3);
                }
                {
                  const __m512i mk1_x1 = pc512_broadcast_group((const void*)(A_pk2 + ((mk_p * 12) + 2)));
                  acc1_5_v4 = pc512_dpbf16_ps(acc1_5_v4, mk1_x1, mk1_y0);
                  acc1_5_v5 = pc512_dpbf16_ps(acc1_5_v5, mk1_x1, mk1_y1);
                  acc1_5_v6 = pc512_dpbf16_ps(acc1_5_v6, mk1_x1, mk1_y2);
                  acc1_5_v7 = pc512_dpbf16_ps(acc1_5_v7, mk1_x1, mk1_y3);
                }
                {
                  const __m512i mk1_x2 = pc512_broadcast_group((const void*)(A_pk2 + ((mk_p * 12) + 4)));
                  acc1_5_v8 = pc512_dpbf16_ps(acc1_5_v8, mk1_x2, mk1_y0);
                  acc1_5_v9 = pc512_dpbf16_ps(acc1_5_v9, mk1_x2, mk1_y1);
                  acc1_5_v10 = pc512_dpbf16_ps(acc1_5_v10, mk1_x2, mk1_y2);
                  acc1_5_v11 = pc512_dpbf16_ps(acc1_5_v11, mk1_x2, mk1_y3);
                }
                {
                  const __m512i mk1_x3 = pc512_broadcast_group((const void*)(A_pk2 + ((mk_p * 12) + 6)));
                  acc1_5_v12 = pc512_dpbf16_ps(acc1_5_v12, mk1_x3, mk1_y0);
                  acc1_5_v13 = pc512_dpbf16_ps(acc1_5_v13, mk1_x3, mk1_y1);
                  acc1_5_v14 = pc512_dpbf16_ps(acc1_5_v14, mk1_x3, mk1_y2);
                  acc1_5_v15 = pc512_dpbf16_ps(acc1_5_v15, mk1_x3, mk1_y3);
                }
                {
                  const __m512i mk1_x4 = pc512_broadcast_group((const void*)(A_pk2 + ((mk_p * 12) + 8)));
                  acc1_5_v16 = pc512_dpbf16_ps(acc1_5_v16, mk1_x4, mk1_y0);
                  acc1_5_v17 = pc512_dpbf16_ps(acc1_5_v17, mk1_x4, mk1_y1);
                  acc1_5_v18 = pc512_dpbf16_ps(acc1_5_v18, mk1_x4, mk1_y2);
                  acc1_5_v19 = pc512_dpbf16_ps(acc1_5_v19, mk1_x4, mk1_y3);
                }
              }
            }
          }
        }
      }
      if ((ix9 >= 64)) {
        _mm512_storeu_ps((matmul + (c4 * 64)), acc1_5_v0);
        _mm512_storeu_ps((matmul + ix11), acc1_5_v1);
        _mm512_storeu_ps((matmul + ix13), acc1_5_v2);
        _mm512_storeu_ps((matmul + ix15), acc1_5_v3);
        _mm512_storeu_ps((matmul + ix16), acc1_5_v4);
        _mm512_storeu_ps((matmul + ix17), acc1_5_v5);
        _mm512_storeu_ps((matmul + ix18), acc1_5_v6);
        _mm512_storeu_ps((matmul + ix19), acc1_5_v7);
        _mm512_storeu_ps((matmul + ix20), acc1_5_v8);
        _mm512_storeu_ps((matmul + ix21), acc1_5_v9);
        _mm512_storeu_ps((matmul + ix22), acc1_5_v10);
        _mm512_storeu_ps((matmul + ix23), acc1_5_v11);
        _mm512_storeu_ps((matmul + ix24), acc1_5_v12);
        _mm512_storeu_ps((matmul + ix25), acc1_5_v13);
        _mm512_storeu_ps((matmul + ix26), acc1_5_v14);
        _mm512_storeu_ps((matmul + ix27), acc1_5_v15);
        _mm512_storeu_ps((matmul + ix28), acc1_5_v16);
        _mm512_storeu_ps((matmul + ix29), acc1_5_v17);
        _mm512_storeu_ps((matmul + ix30), acc1_5_v18);
        _mm512_storeu_ps((matmul + ix31), acc1_5_v19);
      } else {
        {
          const pc_mask16 pc_m2021 = pc512_lane_range_ps(0, ix9);
          pc512_mask_storeu_ps((matmul + (c4 * 64)), pc_m2021, acc1_5_v0);
        }
        {
          const pc_mask16 pc_m2022 = pc512_lane_range_ps(0, ix10);
          pc512_mask_storeu_ps((matmul + ix11), pc_m2022, acc1_5_v1);
        }
        {
          const pc_mask16 pc_m2023 = pc512_lane_range_ps(0, ix12);
          pc512_mask_storeu_ps((matmul + ix13), pc_m2023, acc1_5_v2);
        }
        {
          const pc_mask16 pc_m2024 = pc512_lane_range_ps(0, ix14);
          pc512_mask_storeu_ps((matmul + ix15), pc_m2024, acc1_5_v3);
        }
        {
          const pc_mask16 pc_m2025 = pc512_lane_range_ps(0, ix9);
          pc512_mask_storeu_ps((matmul + ix16), pc_m2025, acc1_5_v4);
        }
        {
          const pc_mask16 pc_m2026 = pc512_lane_range_ps(0, ix10);
          pc512_mask_storeu_ps((matmul + ix17), pc_m2026, acc1_5_v5);
        }
        {
          const pc_mask16 pc_m2027 = pc512_lane_range_ps(0, ix12);
          pc512_mask_storeu_ps((matmul + ix18), pc_m2027, acc1_5_v6);
        }
        {
          const pc_mask16 pc_m2028 = pc512_lane_range_ps(0, ix14);
          pc512_mask_storeu_ps((matmul + ix19), pc_m2028, acc1_5_v7);
        }
        {
          const pc_mask16 pc_m2029 = pc512_lane_range_ps(0, ix9);
          pc512_mask_storeu_ps((matmul + ix20), pc_m2029, acc1_5_v8);
        }
        {
          const pc_mask16 pc_m2030 = pc512_lane_range_ps(0, ix10);
          pc512_mask_storeu_ps((matmul + ix21), pc_m2030, acc1_5_v9);
        }
        {
          const pc_mask16 pc_m2031 = pc512_lane_range_ps(0, ix12);
          pc512_mask_storeu_ps((matmul + ix22), pc_m2031, acc1_5_v10);
        }
        {
          const pc_mask16 pc_m2032 = pc512_lane_range_ps(0, ix14);
          pc512_mask_storeu_ps((matmul + ix23), pc_m2032, acc1_5_v11);
        }
        {
          const pc_mask16 pc_m2033 = pc512_lane_range_ps(0, ix9);
          pc512_mask_storeu_ps((matmul + ix24), pc_m2033, acc1_5_v12);
        }
        {
          const pc_mask16 pc_m2034 = pc512_lane_range_ps(0, ix10);
          pc512_mask_storeu_ps((matmul + ix25), pc_m2034, acc1_5_v13);
        }
        {
          const pc_mask16 pc_m2035 = pc512_lane_range_ps(0, ix12);
          pc512_mask_storeu_ps((matmul + ix26), pc_m2035, acc1_5_v14);
        }
        {
          const pc_mask16 pc_m2036 = pc512_lane_range_ps(0, ix14);
          pc512_mask_storeu_ps((matmul + ix27), pc_m2036, acc1_5_v15);
        }
        {
          const pc_mask16 pc_m2037 = pc512_lane_range_ps(0, ix9);
          pc512_mask_storeu_ps((matmul + ix28), pc_m2037, acc1_5_v16);
        }
        {
          const pc_mask16 pc_m2038 = pc512_lane_range_ps(0, ix10);
          pc512_mask_storeu_ps((matmul + ix29), pc_m2038, acc1_5_v17);
        }
        {
          const pc_mask16 pc_m2039 = pc512_lane_range_ps(0, ix12);
          pc512_mask_storeu_ps((matmul + ix30), pc_m2039, acc1_5_v18);
        }
        {
          const pc_mask16 pc_m2040 = pc512_lane_range_ps(0, ix14);
          pc512_mask_storeu_ps((matmul + ix31), pc_m2040, acc1_5_v19);
        }
      }
    }
  }
}

void mm_bfloat16(const uint16_t* restrict A, const uint16_t* restrict B, float* restrict matmul) {
  {
    uint16_t* restrict A_pk2 = (uint16_t*)aligned_alloc(64, ((sizeof(uint16_t) * (size_t)(((5 * 6) * 2)) + 63) / 64) * 64);
    if (A_pk2 == NULL) { __atomic_store_n(&pc_alloc_failed, 1, __ATOMIC_RELAXED); } else {
      {
        uint16_t* restrict B_pk1 = (uint16_t*)aligned_alloc(64, ((sizeof(uint16_t) * (size_t)((((2 * 5) * 64) * 2)) + 63) / 64) * 64);
        if (B_pk1 == NULL) { __atomic_store_n(&pc_alloc_failed, 1, __ATOMIC_RELAXED); } else {
          #pragma omp parallel for schedule(static)
          for (int64_t pk2_l = 0; pk2_l < 5; ++pk2_l) {
            for (int64_t pk2_p = 0; pk2_p < 4; ++pk2_p) {
              for (int64_t pk2_g = 0; pk2_g < 2; ++pk2_g) {
                A_pk2[(((pk2_p * 12) + (pk2_l * 2)) + pk2_g)] = A[(((pk2_l * 9) + (pk2_p * 2)) + pk2_g)];
              }
            }
          }
          #pragma omp parallel for schedule(static)
          for (int64_t pk2_l = 0; pk2_l < 5; ++pk2_l) {
            for (int64_t pk2_g = 0; pk2_g < 2; ++pk2_g) {
              A_pk2[(((pk2_l * 2) + pk2_g) + 48)] = ((((pk2_g + 8) < 9)) ? A[(((pk2_l * 9) + pk2_g) + 8)] : 0);
            }
          }
          #pragma omp parallel for schedule(static)
          for (int64_t pk2_p = 0; pk2_p < 5; ++pk2_p) {
            for (int64_t pk2_g = 0; pk2_g < 2; ++pk2_g) {
              A_pk2[(((pk2_p * 12) + pk2_g) + 10)] = 0;
            }
          }
          #pragma omp parallel for schedule(static)
          for (int64_t pk1_q = 0; pk1_q < 2; ++pk1_q) {
            const int64_t ix1 = pc_min_i64(64, ((-(pk1_q * 64)) + 70));
            for (int64_t pk1_p = 0; pk1_p < 4; ++pk1_p) {
              for (int64_t pk1_l = 0; pk1_l < ix1; ++pk1_l) {
                for (int64_t pk1_g = 0; pk1_g < 2; ++pk1_g) {
                  B_pk1[((((pk1_q * 640) + (pk1_p * 128)) + (pk1_l * 2)) + pk1_g)] = B[((((pk1_p * 140) + (pk1_g * 70)) + (pk1_q * 64)) + pk1_l)];
                }
              }
            }
            for (int64_t pk1_l = 0; pk1_l < ix1; ++pk1_l) {
              for (int64_t pk1_g = 0; pk1_g < 2; ++pk1_g) {
                B_pk1[((((pk1_q * 640) + (pk1_l * 2)) + pk1_g) + 512)] = ((((pk1_g + 8) < 9)) ? B[((((pk1_g * 70) + (pk1_q * 64)) + pk1_l) + 560)] : 0);
              }
            }
            for (int64_t pk1_p = 0; pk1_p < 5; ++pk1_p) {
              for (int64_t pk1_l = ix1; pk1_l < ix1 + ((-ix1) + 64); ++pk1_l) {
                for (int64_t pk1_g = 0; pk1_g < 2; ++pk1_g) {
                  B_pk1[((((pk1_q * 640) + (pk1_p * 128)) + (pk1_l * 2)) + pk1_g)] = 0;
                }
              }
            }
          }
          #pragma omp parallel for schedule(static)
          for (int64_t c4 = 0; c4 < 2; ++c4) {
            for (int64_t c5 = 0; c5 < 5; ++c5) {
              const int64_t ix2 = pc_min_i64(63, ((-(c4 * 64)) + 69));
              const int64_t ix3 = (ix2 + 1);
              if ((ix3 > 0)) {
                const int64_t ix5 = ((c5 * 70) + (c4 * 64));
                const int64_t ix4 = pc_floordiv(ix3, 16);
                const int64_t ix6 = (ix4 * 16);
                const int64_t ix7 = ((ix2 - ix6) + 1);
                for (int64_t c6_v = 0; c6_v < ix4; ++c6_v) {
                  _mm512_storeu_ps((matmul + (ix5 + (c6_v * 16))), _mm512_set1_ps(0.0f));
                }
                if ((ix7 > 0)) {
                  {
                    const pc_mask16 pc_m1 = pc512_lane_range_ps(0, ix7);
                    pc512_mask_storeu_ps((matmul + (ix5 + ix6)), pc_m1, _mm512_set1_ps(0.0f));
                  }
                }
              }
            }
            pc_dot_tile5_1(c4, matmul, B_pk1, A_pk2);
          }
          free(B_pk1);
        }
      }
      free(A_pk2);
    }
  }
}
