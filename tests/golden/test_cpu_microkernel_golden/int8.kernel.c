static __attribute__((noinline)) void pc_dot_tile5_1(int64_t c4, int32_t* restrict matmul, const int32_t* restrict B_pk1_sum, const int8_t* restrict B_pk1, const int8_t* restrict A_pk2) {
  {
    __m512i acc1_5_v0;
    __m512i acc1_5_v1;
    __m512i acc1_5_v2;
    __m512i acc1_5_v3;
    __m512i acc1_5_v4;
    __m512i acc1_5_v5;
    __m512i acc1_5_v6;
    __m512i acc1_5_v7;
    __m512i acc1_5_v8;
    __m512i acc1_5_v9;
    __m512i acc1_5_v10;
    __m512i acc1_5_v11;
    __m512i acc1_5_v12;
    __m512i acc1_5_v13;
    __m512i acc1_5_v14;
    __m512i acc1_5_v15;
    __m512i acc1_5_v16;
    __m512i acc1_5_v17;
    __m512i acc1_5_v18;
    __m512i acc1_5_v19;
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
        const pc_mask16 pc_m1001 = pc512_lane_range_epi32(0, ix9);
        acc1_5_v0 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1001, (matmul + (c4 * 64))), pc512_maskz_loadu_epi32(pc_m1001, (B_pk1_sum + (c4 * 64))));
      }
      {
        const pc_mask16 pc_m1002 = pc512_lane_range_epi32(0, ix10);
        acc1_5_v1 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1002, (matmul + ix11)), pc512_maskz_loadu_epi32(pc_m1002, (B_pk1_sum + ix11)));
      }
      {
        const pc_mask16 pc_m1003 = pc512_lane_range_epi32(0, ix12);
        acc1_5_v2 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1003, (matmul + ix13)), pc512_maskz_loadu_epi32(pc_m1003, (B_pk1_sum + ix13)));
      }
      {
        const pc_mask16 pc_m1004 = pc512_lane_range_epi32(0, ix14);
        acc1_5_v3 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1004, (matmul + ix15)), pc512_maskz_loadu_epi32(pc_m1004, (B_pk1_sum + ix15)));
      }
      {
        const pc_mask16 pc_m1005 = pc512_lane_range_epi32(0, ix9);
        acc1_5_v4 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1005, (matmul + ix16)), pc512_maskz_loadu_epi32(pc_m1005, (B_pk1_sum + (c4 * 64))));
      }
      {
        const pc_mask16 pc_m1006 = pc512_lane_range_epi32(0, ix10);
        acc1_5_v5 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1006, (matmul + ix17)), pc512_maskz_loadu_epi32(pc_m1006, (B_pk1_sum + ix11)));
      }
      {
        const pc_mask16 pc_m1007 = pc512_lane_range_epi32(0, ix12);
        acc1_5_v6 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1007, (matmul + ix18)), pc512_maskz_loadu_epi32(pc_m1007, (B_pk1_sum + ix13)));
      }
      {
        const pc_mask16 pc_m1008 = pc512_lane_range_epi32(0, ix14);
        acc1_5_v7 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1008, (matmul + ix19)), pc512_maskz_loadu_epi32(pc_m1008, (B_pk1_sum + ix15)));
      }
      {
        const pc_mask16 pc_m1009 = pc512_lane_range_epi32(0, ix9);
        acc1_5_v8 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1009, (matmul + ix20)), pc512_maskz_loadu_epi32(pc_m1009, (B_pk1_sum + (c4 * 64))));
      }
      {
        const pc_mask16 pc_m1010 = pc512_lane_range_epi32(0, ix10);
        acc1_5_v9 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1010, (matmul + ix21)), pc512_maskz_loadu_epi32(pc_m1010, (B_pk1_sum + ix11)));
      }
      {
        const pc_mask16 pc_m1011 = pc512_lane_range_epi32(0, ix12);
        acc1_5_v10 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1011, (matmul + ix22)), pc512_maskz_loadu_epi32(pc_m1011, (B_pk1_sum + ix13)));
      }
      {
        const pc_mask16 pc_m1012 = pc512_lane_range_epi32(0, ix14);
        acc1_5_v11 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1012, (matmul + ix23)), pc512_maskz_loadu_epi32(pc_m1012, (B_pk1_sum + ix15)));
      }
      {
        const pc_mask16 pc_m1013 = pc512_lane_range_epi32(0, ix9);
        acc1_5_v12 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1013, (matmul + ix24)), pc512_maskz_loadu_epi32(pc_m1013, (B_pk1_sum + (c4 * 64))));
      }
      {
        const pc_mask16 pc_m1014 = pc512_lane_range_epi32(0, ix10);
        acc1_5_v13 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1014, (matmul + ix25)), pc512_maskz_loadu_epi32(pc_m1014, (B_pk1_sum + ix11)));
      }
      {
        const pc_mask16 pc_m1015 = pc512_lane_range_epi32(0, ix12);
        acc1_5_v14 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1015, (matmul + ix26)), pc512_maskz_loadu_epi32(pc_m1015, (B_pk1_sum + ix13)));
      }
      {
        const pc_mask16 pc_m1016 = pc512_lane_range_epi32(0, ix14);
        acc1_5_v15 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1016, (matmul + ix27)), pc512_maskz_loadu_epi32(pc_m1016, (B_pk1_sum + ix15)));
      }
      {
        const pc_mask16 pc_m1017 = pc512_lane_range_epi32(0, ix9);
        acc1_5_v16 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1017, (matmul + ix28)), pc512_maskz_loadu_epi32(pc_m1017, (B_pk1_sum + (c4 * 64))));
      }
      {
        const pc_mask16 pc_m1018 = pc512_lane_range_epi32(0, ix10);
        acc1_5_v17 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1018, (matmul + ix29)), pc512_maskz_loadu_epi32(pc_m1018, (B_pk1_sum + ix11)));
      }
      {
        const pc_mask16 pc_m1019 = pc512_lane_range_epi32(0, ix12);
        acc1_5_v18 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1019, (matmul + ix30)), pc512_maskz_loadu_epi32(pc_m1019, (B_pk1_sum + ix13)));
      }
      {
        const pc_mask16 pc_m1020 = pc512_lane_range_epi32(0, ix14);
        acc1_5_v19 = _mm512_add_epi32(pc512_maskz_loadu_epi32(pc_m1020, (matmul + ix31)), pc512_maskz_loadu_epi32(pc_m1020, (B_pk1_sum + ix15)));
      }
      for (int64_t mk_p = 0; mk_p < 3; ++mk_p) {
        const int64_t ix32 = ((c4 * 768) + (mk_p * 256));
        {
          const __m512i mk1_y0 = _mm512_loadu_si512((const void*)(B_pk1 + ix32));
          {
            const __m512i mk1_y1 = _mm512_loadu_si512((const void*)(B_pk1 + (ix32 + 64)));
            {
              const __m512i mk1_y2 = _mm512_loadu_si512((const void*)(B_pk1 + (ix32 + 128)));
              {
                const __m512i mk1_y3 = _mm512_loadu_si512((const void*)(B_pk1 + (ix32 + 192)));
                {
                  const __m512i mk1_x0 = pc512_broadcast_group((const void*)(A_pk2 + (mk_p * 24)));
                  acc1_5_v0 = pc512_dpbusd_epi32(acc1_5_v0, mk1_x0, mk1_y0);
                  acc1_5_v1 = pc512_dpbusd_epi32(acc1_5_v1, mk1_x0, mk1_y1);
                  acc1_5_v2 = pc512_dpbusd_epi32(acc1_5_v2, mk1_x0, mk1_y2);
                  acc1_5_v3 = pc512_dpbusd_epi32(acc1_5_v3, mk1_x0, mk1_y3);
                }
                {
                  const __m512i mk1_x1 = pc512_broadcast_group((const void*)(A_pk2 + ((mk_p * 24) + 4)));
                  acc1_5_v4 = pc512_dpbusd_epi32(acc1_5_v4, mk1_x1, mk1_y0);
                  acc1_5_v5 = pc512_dpbusd_epi32(acc1_5_v5, mk1_x1, mk1_y1);
                  acc1_5_v6 = pc512_dpbusd_epi32(acc1_5_v6, mk1_x1, mk1_y2);
                  acc1_5_v7 = pc512_dpbusd_epi32(acc1_5_v7, mk1_x1, mk1_y3);
                }
                {
                  const __m512i mk1_x2 = pc512_broadcast_group((const void*)(A_pk2 + ((mk_p * 24) + 8)));
                  acc1_5_v8 = pc512_dpbusd_epi32(acc1_5_v8, mk1_x2, mk1_y0);
                  acc1_5_v9 = pc512_dpbusd_epi32(acc1_5_v9, mk1_x2, mk1_y1);
                  acc1_5_v10 = pc512_dpbusd_epi32(acc1_5_v10, mk1_x2, mk1_y2);
                  acc1_5_v11 = pc512_dpbusd_epi32(acc1_5_v11, mk1_x2, mk1_y3);
                }
                {
                  const __m512i mk1_x3 = pc512_broadcast_group((const void*)(A_pk2 + ((mk_p * 24) + 12)));
                  acc1_5_v12 = pc512_dpbusd_epi32(acc1_5_v12, mk1_x3, mk1_y0);
                  acc1_5_v13 = pc512_dpbusd_epi32(acc1_5_v13, mk1_x3, mk1_y1);
                  acc1_5_v14 = pc512_dpbusd_epi32(acc1_5_v14, mk1_x3, mk1_y2);
                  acc1_5_v15 = pc512_dpbusd_epi32(acc1_5_v15, mk1_x3, mk1_y3);
                }
                {
                  const __m512i mk1_x4 = pc512_broadcast_group((const void*)(A_pk2 + ((mk_p * 24) + 16)));
                  acc1_5_v16 = pc512_dpbusd_epi32(acc1_5_v16, mk1_x4, mk1_y0);
                  acc1_5_v17 = pc512_dpbusd_epi32(acc1_5_v17, mk1_x4, mk1_y1);
                  acc1_5_v18 = pc512_dpbusd_epi32(acc1_5_v18, mk1_x4, mk1_y2);
                  acc1_5_v19 = pc512_dpbusd_epi32(acc1_5_v19, mk1_x4, mk1_y3);
                }
              }
            }
          }
        }
      }
      if ((ix9 >= 64)) {
        _mm512_storeu_epi32((matmul + (c4 * 64)), acc1_5_v0);
        _mm512_storeu_epi32((matmul + ix11), acc1_5_v1);
        _mm512_storeu_epi32((matmul + ix13), acc1_5_v2);
        _mm512_storeu_epi32((matmul + ix15), acc1_5_v3);
        _mm512_storeu_epi32((matmul + ix16), acc1_5_v4);
        _mm512_storeu_epi32((matmul + ix17), acc1_5_v5);
        _mm512_storeu_epi32((matmul + ix18), acc1_5_v6);
        _mm512_storeu_epi32((matmul + ix19), acc1_5_v7);
        _mm512_storeu_epi32((matmul + ix20), acc1_5_v8);
        _mm512_storeu_epi32((matmul + ix21), acc1_5_v9);
        _mm512_storeu_epi32((matmul + ix22), acc1_5_v10);
        _mm512_storeu_epi32((matmul + ix23), acc1_5_v11);
        _mm512_storeu_epi32((matmul + ix24), acc1_5_v12);
        _mm512_storeu_epi32((matmul + ix25), acc1_5_v13);
        _mm512_storeu_epi32((matmul + ix26), acc1_5_v14);
        _mm512_storeu_epi32((matmul + ix27), acc1_5_v15);
        _mm512_storeu_epi32((matmul + ix28), acc1_5_v16);
        _mm512_storeu_epi32((matmul + ix29), acc1_5_v17);
        _mm512_storeu_epi32((matmul + ix30), acc1_5_v18);
        _mm512_storeu_epi32((matmul + ix31), acc1_5_v19);
      } else {
        {
          const pc_mask16 pc_m1021 = pc512_lane_range_epi32(0, ix9);
          pc512_mask_storeu_epi32((matmul + (c4 * 64)), pc_m1021, acc1_5_v0);
        }
        {
          const pc_mask16 pc_m1022 = pc512_lane_range_epi32(0, ix10);
          pc512_mask_storeu_epi32((matmul + ix11), pc_m1022, acc1_5_v1);
        }
        {
          const pc_mask16 pc_m1023 = pc512_lane_range_epi32(0, ix12);
          pc512_mask_storeu_epi32((matmul + ix13), pc_m1023, acc1_5_v2);
        }
        {
          const pc_mask16 pc_m1024 = pc512_lane_range_epi32(0, ix14);
          pc512_mask_storeu_epi32((matmul + ix15), pc_m1024, acc1_5_v3);
        }
        {
          const pc_mask16 pc_m1025 = pc512_lane_range_epi32(0, ix9);
          pc512_mask_storeu_epi32((matmul + ix16), pc_m1025, acc1_5_v4);
        }
        {
          const pc_mask16 pc_m1026 = pc512_lane_range_epi32(0, ix10);
          pc512_mask_storeu_epi32((matmul + ix17), pc_m1026, acc1_5_v5);
        }
        {
          const pc_mask16 pc_m1027 = pc512_lane_range_epi32(0, ix12);
          pc512_mask_storeu_epi32((matmul + ix18), pc_m1027, acc1_5_v6);
        }
        {
          const pc_mask16 pc_m1028 = pc512_lane_range_epi32(0, ix14);
          pc512_mask_storeu_epi32((matmul + ix19), pc_m1028, acc1_5_v7);
        }
        {
          const pc_mask16 pc_m1029 = pc512_lane_range_epi32(0, ix9);
          pc512_mask_storeu_epi32((matmul + ix20), pc_m1029, acc1_5_v8);
        }
        {
          const pc_mask16 pc_m1030 = pc512_lane_range_epi32(0, ix10);
          pc512_mask_storeu_epi32((matmul + ix21), pc_m1030, acc1_5_v9);
        }
        {
          const pc_mask16 pc_m1031 = pc512_lane_range_epi32(0, ix12);
          pc512_mask_storeu_epi32((matmul + ix22), pc_m1031, acc1_5_v10);
        }
        {
          const pc_mask16 pc_m1032 = pc512_lane_range_epi32(0, ix14);
          pc512_mask_storeu_epi32((matmul + ix23), pc_m1032, acc1_5_v11);
        }
        {
          const pc_mask16 pc_m1033 = pc512_lane_range_epi32(0, ix9);
          pc512_mask_storeu_epi32((matmul + ix24), pc_m1033, acc1_5_v12);
        }
        {
          const pc_mask16 pc_m1034 = pc512_lane_range_epi32(0, ix10);
          pc512_mask_storeu_epi32((matmul + ix25), pc_m1034, acc1_5_v13);
        }
        {
          const pc_mask16 pc_m1035 = pc512_lane_range_epi32(0, ix12);
          pc512_mask_storeu_epi32((matmul + ix26), pc_m1035, acc1_5_v14);
        }
        {
          const pc_mask16 pc_m1036 = pc512_lane_range_epi32(0, ix14);
          pc512_mask_storeu_epi32((matmul + ix27), pc_m1036, acc1_5_v15);
        }
        {
          const pc_mask16 pc_m1037 = pc512_lane_range_epi32(0, ix9);
          pc512_mask_storeu_epi32((matmul + ix28), pc_m1037, acc1_5_v16);
        }
        {
          const pc_mask16 pc_m1038 = pc512_lane_range_epi32(0, ix10);
          pc512_mask_storeu_epi32((matmul + ix29), pc_m1038, acc1_5_v17);
        }
        {
          const pc_mask16 pc_m1039 = pc512_lane_range_epi32(0, ix12);
          pc512_mask_storeu_epi32((matmul + ix30), pc_m1039, acc1_5_v18);
        }
        {
          const pc_mask16 pc_m1040 = pc512_lane_range_epi32(0, ix14);
          pc512_mask_storeu_epi32((matmul + ix31), pc_m1040, acc1_5_v19);
        }
      }
    }
  }
}

void mm_int8(const int8_t* restrict A, const int8_t* restrict B, int32_t* restrict matmul) {
  {
    int8_t* restrict A_pk2 = (int8_t*)aligned_alloc(64, ((sizeof(int8_t) * (size_t)(((3 * 6) * 4)) + 63) / 64) * 64);
    if (A_pk2 == NULL) { __atomic_store_n(&pc_alloc_failed, 1, __ATOMIC_RELAXED); } else {
      {
        int32_t* restrict B_pk1_sum = (int32_t*)aligned_alloc(64, ((sizeof(int32_t) * (size_t)((2 * 64)) + 63) / 64) * 64);
        if (B_pk1_sum == NULL) { __atomic_store_n(&pc_alloc_failed, 1, __ATOMIC_RELAXED); } else {
          {
            int8_t* restrict B_pk1 = (int8_t*)aligned_alloc(64, ((sizeof(int8_t) * (size_t)((((2 * 3) * 64) * 4)) + 63) / 64) * 64);
            if (B_pk1 == NULL) { __atomic_store_n(&pc_alloc_failed, 1, __ATOMIC_RELAXED); } else {
              #pragma omp parallel for schedule(static)
              for (int64_t pk2_l = 0; pk2_l < 5; ++pk2_l) {
                for (int64_t pk2_p = 0; pk2_p < 2; ++pk2_p) {
                  for (int64_t pk2_g = 0; pk2_g < 4; ++pk2_g) {
                    A_pk2[(((pk2_p * 24) + (pk2_l * 4)) + pk2_g)] = ((int8_t)(((int8_t)(A[(((pk2_l * 9) + (pk2_p * 4)) + pk2_g)])) ^ ((int8_t)((-128)))));
                  }
                }
              }
              #pragma omp parallel for schedule(static)
              for (int64_t pk2_l = 0; pk2_l < 5; ++pk2_l) {
                for (int64_t pk2_g = 0; pk2_g < 4; ++pk2_g) {
                  A_pk2[(((pk2_l * 4) + pk2_g) + 48)] = ((((pk2_g + 8) < 9)) ? (((int8_t)(((int8_t)(A[(((pk2_l * 9) + pk2_g) + 8)])) ^ ((int8_t)((-128)))))) : (0));
                }
              }
              #pragma omp parallel for schedule(static)
              for (int64_t pk2_p = 0; pk2_p < 3; ++pk2_p) {
                for (int64_t pk2_g = 0; pk2_g < 4; ++pk2_g) {
                  A_pk2[(((pk2_p * 24) + pk2_g) + 20)] = 0;
                }
              }
              #pragma omp parallel for schedule(static)
              for (int64_t pk1_q = 0; pk1_q < 2; ++pk1_q) {
                for (int64_t pk1_l = 0; pk1_l < 64; ++pk1_l) {
                  B_pk1_sum[((pk1_q * 64) + pk1_l)] = 0;
                }
              }
              #pragma omp parallel for schedule(static)
              for (int64_t pk1_q = 0; pk1_q < 2; ++pk1_q) {
                const int64_t ix1 = pc_min_i64(64, ((-(pk1_q * 64)) + 70));
                for (int64_t pk1_p = 0; pk1_p < 2; ++pk1_p) {
                  for (int64_t pk1_l = 0; pk1_l < ix1; ++pk1_l) {
                    for (int64_t pk1_g = 0; pk1_g < 4; ++pk1_g) {
                      const int64_t ix3 = ((pk1_q * 64) + pk1_l);
                      const int64_t ix2 = ((((pk1_p * 280) + (pk1_g * 70)) + (pk1_q * 64)) + pk1_l);
                      B_pk1[((((pk1_q * 768) + (pk1_p * 256)) + (pk1_l * 4)) + pk1_g)] = B[ix2];
                      B_pk1_sum[ix3] = ((int32_t)((int64_t)(B_pk1_sum[ix3]) + (int64_t)(((int64_t)(int32_t)(B[ix2])))));
                    }
                  }
                }
                for (int64_t pk1_l = 0; pk1_l < ix1; ++pk1_l) {
                  for (int64_t pk1_g = 0; pk1_g < 4; ++pk1_g) {
                    const bool ix4 = ((pk1_g + 8) < 9);
                    const int64_t ix6 = ((pk1_q * 64) + pk1_l);
                    const int64_t ix5 = ((((pk1_g * 70) + (pk1_q * 64)) + pk1_l) + 560);
                    B_pk1[((((pk1_q * 768) + (pk1_l * 4)) + pk1_g) + 512)] = ((ix4) ? (B[ix5]) : (0));
                    B_pk1_sum[ix6] = ((int32_t)((int64_t)(B_pk1_sum[ix6]) + (int64_t)(((ix4) ? (((int64_t)(int32_t)(B[ix5]))) : (0)))));
                  }
                }
                for (int64_t pk1_p = 0; pk1_p < 3; ++pk1_p) {
                  for (int64_t pk1_l = ix1; pk1_l < ix1 + ((-ix1) + 64); ++pk1_l) {
                    for (int64_t pk1_g = 0; pk1_g < 4; ++pk1_g) {
                      B_pk1[((((pk1_q * 768) + (pk1_p * 256)) + (pk1_l * 4)) + pk1_g)] = 0;
                    }
                  }
                }
              }
              #pragma omp parallel for schedule(static)
              for (int64_t pk1_q = 0; pk1_q < 2; ++pk1_q) {
                for (int64_t pk1_l = 0; pk1_l < 64; ++pk1_l) {
                  const int64_t ix7 = ((pk1_q * 64) + pk1_l);
                  B_pk1_sum[ix7] = ((int32_t)(-(int64_t)(((int32_t)((int64_t)(B_pk1_sum[ix7]) * (int64_t)(128))))));
                }
              }
              #pragma omp parallel for schedule(static)
              for (int64_t c4 = 0; c4 < 2; ++c4) {
                for (int64_t c5 = 0; c5 < 5; ++c5) {
                  for (int64_t c6 = 0; c6 < (pc_min_i64(63, ((-(c4 * 64)) + 69)) + 1); ++c6) {
                    matmul[(((c5 * 70) + (c4 * 64)) + c6)] = 0;
                  }
                }
                pc_dot_tile5_1(c4, matmul, B_pk1_sum, B_pk1, A_pk2);
              }
              free(B_pk1);
            }
          }
          free(B_pk1_sum);
        }
      }
      free(A_pk2);
    }
  }
}
