extern "C" __global__ void __launch_bounds__(256, 1) matmul_bias_relu_float16_k0(int64_t N, int64_t K, int64_t M, const __half* __restrict__ A, const __half* __restrict__ B, const __half* __restrict__ bias, float* __restrict__ matmul_bias_relu, const __grid_constant__ CUtensorMap pc_tmap0, const __grid_constant__ CUtensorMap pc_tmap1) {
  extern __shared__ __align__(128) unsigned char pc_dyn_smem[];
  unsigned char* pc_smem_base = pc_dyn_smem + ((1024u - (pc_smem(pc_dyn_smem) & 1023u)) & 1023u);
  long long* bar1 = reinterpret_cast<long long*>(pc_smem_base + 0);
  __half* Bs1 = reinterpret_cast<__half*>(pc_smem_base + 1024);
  __half* As1 = reinterpret_cast<__half*>(pc_smem_base + 17408);
  if ((int64_t)threadIdx.x < 128) {
    const int64_t tx1 = 0 + (int64_t)threadIdx.x;
    if ((int64_t)threadIdx.y < 2) {
      const int64_t ty1 = 0 + (int64_t)threadIdx.y;
      if ((int64_t)threadIdx.z < 1) {
        const int64_t tz1 = 0 + (int64_t)threadIdx.z;
        float xch1[2];
        float res1[4];
        float acc1[32];
        // tc: block:0
        {
          const int64_t pb1 = 0 + (int64_t)blockIdx.x;
          if (((tx1 + (ty1 * 128)) == 0)) {
            pc_mbar_init(&bar1[0], (int)(32));
            pc_mbar_init(&bar1[1], (int)(32));
            pc_mbar_init(&bar1[2], (int)(128));
            pc_mbar_init(&bar1[3], (int)(128));
            pc_fence_mbar_init();
          }
          __syncthreads();
          // warp_roles: 1
          if ((ty1 == 0)) {
            pc_setmaxnreg_dec<80>();
            if ((tx1 < 32)) {
              if (((((K * 2) % 16) == 0) && (((M * 2) % 16) == 0))) {
                for (int64_t tj1 = 0; tj1 < pc_floordiv((((((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)) + pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132)) - pb1) - 1), pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132)); ++tj1) {
                  {
                    const int64_t c0 = pc_floordiv((pb1 + (tj1 * pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132))), (((M - 1) / 64) + 1));
                    {
                      const int64_t c1 = pc_floormod((pb1 + (tj1 * pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132))), (((M - 1) / 64) + 1));
                      for (int64_t c2 = 0; c2 < (((K - 1) / 64) + 1); ++c2) {
                        pc_mbar_wait(&bar1[((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) + 2)], (int)(((-((((tj1 * (((K - 1) / 64) + 1)) + c2) / 2) % 2)) + 1)));
                        if (((tx1 % 32) == 0)) {
                          pc_mbar_arrive_tx(&bar1[(((tj1 * (((K - 1) / 64) + 1)) + c2) % 2)], (int)(16384));
                          pc_tma_load_2d(&As1[((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096)], &pc_tmap0, &bar1[(((tj1 * (((K - 1) / 64) + 1)) + c2) % 2)], (int)((c2 * 64)), (int)((c0 * 64)));
                          pc_tma_load_2d(&Bs1[((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096)], &pc_tmap1, &bar1[(((tj1 * (((K - 1) / 64) + 1)) + c2) % 2)], (int)((c1 * 64)), (int)((c2 * 64)));
                        } else {
                          pc_mbar_arrive(&bar1[(((tj1 * (((K - 1) / 64) + 1)) + c2) % 2)]);
                        }
                      }
                    }
                  }
                }
              } else {
                for (int64_t tj1 = 0; tj1 < pc_floordiv((((((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)) + pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132)) - pb1) - 1), pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132)); ++tj1) {
                  {
                    const int64_t c0 = pc_floordiv((pb1 + (tj1 * pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132))), (((M - 1) / 64) + 1));
                    {
                      const int64_t c1 = pc_floormod((pb1 + (tj1 * pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132))), (((M - 1) / 64) + 1));
                      for (int64_t c2 = 0; c2 < (((K - 1) / 64) + 1); ++c2) {
                        pc_mbar_wait(&bar1[((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) + 2)], (int)(((-((((tj1 * (((K - 1) / 64) + 1)) + c2) / 2) % 2)) + 1)));
                        for (int64_t cq1 = 0; cq1 < 128; ++cq1) {
                          if ((((tx1 % 32) + (cq1 * 32)) < 4096)) {
                            As1[((((((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + (((((tx1 % 32) + (cq1 * 32)) % 64) / 64) * 4096)) + ((((tx1 % 32) + (cq1 * 32)) / 64) * 64)) + ((((((((tx1 % 32) + (cq1 * 32)) % 64) % 64) / 8)) ^ (((((tx1 % 32) + (cq1 * 32)) / 64) % 8))) * 8)) + (((((tx1 % 32) + (cq1 * 32)) % 64) % 64) % 8))] = __float2half(((((((c0 * 64) + (((tx1 % 32) + (cq1 * 32)) / 64)) < N) && (((c2 * 64) + (((tx1 % 32) + (cq1 * 32)) % 64)) < K))) ? (((float)(__half2float(A[(((((c0 * 64) + (((tx1 % 32) + (cq1 * 32)) / 64)) * K) + (c2 * 64)) + (((tx1 % 32) + (cq1 * 32)) % 64))])))) : (0.0f)));
                          }
                        }
                        for (int64_t cq1 = 0; cq1 < 128; ++cq1) {
                          if ((((tx1 % 32) + (cq1 * 32)) < 4096)) {
                            Bs1[((((((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + (((((tx1 % 32) + (cq1 * 32)) % 64) / 64) * 4096)) + ((((tx1 % 32) + (cq1 * 32)) / 64) * 64)) + ((((((((tx1 % 32) + (cq1 * 32)) % 64) % 64) / 8)) ^ (((((tx1 % 32) + (cq1 * 32)) / 64) % 8))) * 8)) + (((((tx1 % 32) + (cq1 * 32)) % 64) % 64) % 8))] = __float2half(((((((c2 * 64) + (((tx1 % 32) + (cq1 * 32)) / 64)) < K) && (((c1 * 64) + (((tx1 % 32) + (cq1 * 32)) % 64)) < M))) ? (((float)(__half2float(B[(((((c2 * 64) + (((tx1 % 32) + (cq1 * 32)) / 64)) * M) + (c1 * 64)) + (((tx1 % 32) + (cq1 * 32)) % 64))])))) : (0.0f)));
                          }
                        }
                        pc_fence_proxy_async();
                        pc_mbar_arrive(&bar1[(((tj1 * (((K - 1) / 64) + 1)) + c2) % 2)]);
                      }
                    }
                  }
                }
              }
            }
          }
          if ((ty1 >= 1)) {
            pc_setmaxnreg_inc<248>();
            for (int64_t tj1 = 0; tj1 < pc_floordiv((((((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)) + pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132)) - pb1) - 1), pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132)); ++tj1) {
              {
                const int64_t c0 = pc_floordiv((pb1 + (tj1 * pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132))), (((M - 1) / 64) + 1));
                {
                  const int64_t c1 = pc_floormod((pb1 + (tj1 * pc_min_i64(((((N - 1) / 64) + 1) * (((M - 1) / 64) + 1)), 132))), (((M - 1) / 64) + 1));
                  // tc_frag: matmul_bias_relu_mm_init
                  #pragma unroll
                  for (int64_t fjn1 = 0; fjn1 < 8; ++fjn1) {
                    #pragma unroll
                    for (int64_t fr1 = 0; fr1 < 4; ++fr1) {
                      if (((((((((c0 * 64) + (ty1 * 64)) + ((tx1 / 32) * 16)) + ((fr1 / 2) * 8)) + ((tx1 % 32) / 4)) - 64) < N) && (((((c1 * 64) + (fjn1 * 8)) + (fr1 % 2)) + ((tx1 % 4) * 2)) < M))) {
                        acc1[((fjn1 * 4) + fr1)] = 0.0f;
                      }
                    }
                  }
                  // wgmma_mainloop: 1
                  pc_wgmma_fence_operand<32>(&acc1[0]);
                  for (int64_t c2 = 0; c2 < (((K - 1) / 64) + 1); ++c2) {
                    pc_mbar_wait(&bar1[(((tj1 * (((K - 1) / 64) + 1)) + c2) % 2)], (int)(((((tj1 * (((K - 1) / 64) + 1)) + c2) / 2) % 2)));
                    pc_wgmma_fence();
                    pc_wgmma_m64n64k16_f16_01(&acc1[0], (uint64_t)(pc_wgmma_desc(&As1[((((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + (ty1 * 4096)) - 4096)], 16u, 1024u, 1u)), (uint64_t)(pc_wgmma_desc(&Bs1[((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096)], 8192u, 1024u, 1u)), (int)(1));
                    pc_wgmma_m64n64k16_f16_01(&acc1[0], (uint64_t)(pc_wgmma_desc(&As1[((((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + (ty1 * 4096)) - 4080)], 16u, 1024u, 1u)), (uint64_t)(pc_wgmma_desc(&Bs1[(((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + 1024)], 8192u, 1024u, 1u)), (int)(1));
                    pc_wgmma_m64n64k16_f16_01(&acc1[0], (uint64_t)(pc_wgmma_desc(&As1[((((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + (ty1 * 4096)) - 4064)], 16u, 1024u, 1u)), (uint64_t)(pc_wgmma_desc(&Bs1[(((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + 2048)], 8192u, 1024u, 1u)), (int)(1));
                    pc_wgmma_m64n64k16_f16_01(&acc1[0], (uint64_t)(pc_wgmma_desc(&As1[((((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + (ty1 * 4096)) - 4048)], 16u, 1024u, 1u)), (uint64_t)(pc_wgmma_desc(&Bs1[(((((tj1 * (((K - 1) / 64) + 1)) + c2) % 2) * 4096) + 3072)], 8192u, 1024u, 1u)), (int)(1));
                    pc_wgmma_commit();
                    pc_wgmma_wait<1>();
                    if ((c2 > 0)) {
                      pc_mbar_arrive(&bar1[(pc_floormod((((tj1 * (((K - 1) / 64) + 1)) + c2) - 1), 2) + 2)]);
                    }
                  }
                  pc_wgmma_wait<0>();
                  pc_mbar_arrive(&bar1[((((tj1 * (((K - 1) / 64) + 1)) + ((K - 1) / 64)) % 2) + 2)]);
                  pc_wgmma_fence_operand<32>(&acc1[0]);
                  // tc_frag: matmul_bias_relu
                  #pragma unroll
                  for (int64_t qjn1 = 0; qjn1 < 8; ++qjn1) {
                    res1[0] = (((((((((c0 * 64) + (ty1 * 64)) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 64) < N) && ((((c1 * 64) + (qjn1 * 8)) + ((tx1 % 4) * 2)) < M))) ? (pc_max_f32((acc1[(qjn1 * 4)] + ((float)(__half2float(bias[(((c1 * 64) + (qjn1 * 8)) + ((tx1 % 4) * 2))])))), 0.0f)) : (0.0f));
                    res1[1] = (((((((((c0 * 64) + (ty1 * 64)) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 64) < N) && (((((c1 * 64) + (qjn1 * 8)) + ((tx1 % 4) * 2)) + 1) < M))) ? (pc_max_f32((acc1[((qjn1 * 4) + 1)] + ((float)(__half2float(bias[((((c1 * 64) + (qjn1 * 8)) + ((tx1 % 4) * 2)) + 1)])))), 0.0f)) : (0.0f));
                    res1[2] = (((((((((c0 * 64) + (ty1 * 64)) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 56) < N) && ((((c1 * 64) + (qjn1 * 8)) + ((tx1 % 4) * 2)) < M))) ? (pc_max_f32((acc1[((qjn1 * 4) + 2)] + ((float)(__half2float(bias[(((c1 * 64) + (qjn1 * 8)) + ((tx1 % 4) * 2))])))), 0.0f)) : (0.0f));
                    res1[3] = (((((((((c0 * 64) + (ty1 * 64)) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 56) < N) && (((((c1 * 64) + (qjn1 * 8)) + ((tx1 % 4) * 2)) + 1) < M))) ? (pc_max_f32((acc1[((qjn1 * 4) + 3)] + ((float)(__half2float(bias[((((c1 * 64) + (qjn1 * 8)) + ((tx1 % 4) * 2)) + 1)])))), 0.0f)) : (0.0f));
                    xch1[0] = __shfl_xor_sync(INT64_C(4294967295), ((((tx1 % 2) == 0)) ? (res1[2]) : (res1[0])), 1);
                    xch1[1] = __shfl_xor_sync(INT64_C(4294967295), ((((tx1 % 2) == 0)) ? (res1[3]) : (res1[1])), 1);
                    if ((((c0 * 64) + ((((tx1 % 2) == 0)) ? (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 64)) : (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 56)))) < N)) {
                      if ((((M % 4) == 0) && ((((c1 * 64) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2)))) + 3) < M))) {
                        pc_st4(&matmul_bias_relu[(((((c0 * 64) + ((((tx1 % 2) == 0)) ? (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 64)) : (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 56)))) * M) + (c1 * 64)) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2))))], (float)(((((tx1 % 2) == 0)) ? (res1[0]) : (xch1[0]))), (float)(((((tx1 % 2) == 0)) ? (res1[1]) : (xch1[1]))), (float)(((((tx1 % 2) == 0)) ? (xch1[0]) : (res1[2]))), (float)(((((tx1 % 2) == 0)) ? (xch1[1]) : (res1[3]))));
                      } else {
                        if ((((c1 * 64) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2)))) < M)) {
                          matmul_bias_relu[(((((c0 * 64) + ((((tx1 % 2) == 0)) ? (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 64)) : (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 56)))) * M) + (c1 * 64)) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2))))] = ((((tx1 % 2) == 0)) ? (res1[0]) : (xch1[0]));
                        }
                        if (((((c1 * 64) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2)))) + 1) < M)) {
                          matmul_bias_relu[((((((c0 * 64) + ((((tx1 % 2) == 0)) ? (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 64)) : (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 56)))) * M) + (c1 * 64)) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2)))) + 1)] = ((((tx1 % 2) == 0)) ? (res1[1]) : (xch1[1]));
                        }
                        if (((((c1 * 64) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2)))) + 2) < M)) {
                          matmul_bias_relu[((((((c0 * 64) + ((((tx1 % 2) == 0)) ? (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 64)) : (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 56)))) * M) + (c1 * 64)) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2)))) + 2)] = ((((tx1 % 2) == 0)) ? (xch1[0]) : (res1[2]));
                        }
                        if (((((c1 * 64) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2)))) + 3) < M)) {
                          matmul_bias_relu[((((((c0 * 64) + ((((tx1 % 2) == 0)) ? (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 64)) : (((((ty1 * 64) + ((tx1 / 32) * 16)) + ((tx1 % 32) / 4)) - 56)))) * M) + (c1 * 64)) + ((((tx1 % 2) == 0)) ? (((qjn1 * 8) + ((tx1 % 4) * 2))) : ((((qjn1 * 8) + ((tx1 % 4) * 2)) - 2)))) + 3)] = ((((tx1 % 2) == 0)) ? (xch1[1]) : (res1[3]));
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}
