"""``polycomp_npu.h``: the subset of an Ascend C-style API the printer emits, declared
so that ``g++ -fsyntax-only`` checks every emitted kernel (names, argument counts and
types).  Signatures are simplified from the public Ascend C documentation: tensors are
``GlobalTensor<T>`` / ``LocalTensor<T>``, copies take element counts and strides,
flags are ``SetFlag<HardEvent::SRC_DST>(event)``."""

HEADER = r"""#pragma once
#include <cmath>
#include <cstdint>
#define __global__
#define __aicore__
#define __gm__
typedef uint8_t* GM_ADDR;
namespace AscendC {
struct half { uint16_t bits; };
enum class TPosition { GM, A1, B1, A2, B2, CO1, VECCALC };
enum class HardEvent { MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, M_FIX, FIX_M,
                       MTE2_V, V_MTE2, V_MTE3, MTE3_V, FIX_V, V_FIX, MTE3_MTE1,
                       MTE1_MTE3, MTE2_MTE3, MTE3_MTE2 };
template <typename T> class GlobalTensor {
public:
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t size);
    GlobalTensor<T> operator[](uint64_t offset) const;
};
template <typename T> class LocalTensor {
public:
    LocalTensor<T> operator[](uint32_t offset) const;
};
template <typename T> LocalTensor<T> AllocLocal(TPosition pos, uint32_t address, uint32_t count);
struct Nd2NzParams { uint32_t rows, cols, srcRowStride, dstRows, dstCols; };
// an im2col tile of one image (k0, kExt rows of (c, kh, kw); p0, pExt columns of
// (y, z)) gathered into a fractal L1 tile (polycomp's model of img2col addressing)
struct Im2ColParams { uint32_t k0, kExt, p0, pExt, H, W, KH, KW, OW;
                      uint8_t strideH, strideW, padH, padW, dilationH, dilationW;
                      uint32_t dstRows, dstCols; };
template <typename T> void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                    const Im2ColParams& params);
struct LoadData2DParams { uint32_t startIndex, repeatTimes; bool transpose; };
struct MmadParams { uint16_t m, n, k; bool cmatrixInitVal; };
struct FixpipeParams { uint32_t rows, cols, srcRows, dstRowStride; };
struct DataCopyPadParams { uint32_t rows, cols, srcRowStride, dstRowStride; };
template <typename T> void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                    const Nd2NzParams& params);
// UB -> L1 (MTE3): a tile re-laid out as fractal NZ (the fused chain's P)
template <typename T> void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                    const Nd2NzParams& params);
template <typename T> void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                       const DataCopyPadParams& params);
template <typename T> void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                                       const DataCopyPadParams& params);
template <typename T> void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                    const LoadData2DParams& params);
template <typename T, typename U> void Mmad(const LocalTensor<U>& c, const LocalTensor<T>& a,
                                            const LocalTensor<T>& b, const MmadParams& params);
template <typename T, typename U> void Fixpipe(const GlobalTensor<T>& dst,
                                               const LocalTensor<U>& src,
                                               const FixpipeParams& params);
// vector instructions over `rows` rows of UB tiles (an operand may be a tile, a value
// per row or one row; repeat counts and masks follow from the tiles' shapes)
#define PC_UNARY(N) template <typename T, typename U> \
    void N(const LocalTensor<T>& dst, const LocalTensor<U>& src, uint32_t rows);
#define PC_BINARY(N) \
    template <typename T, typename U, typename V> void N(const LocalTensor<T>& dst, \
        const LocalTensor<U>& a, const LocalTensor<V>& b, uint32_t rows); \
    template <typename T, typename U> void N(const LocalTensor<T>& dst, \
        const LocalTensor<U>& a, float b, uint32_t rows); \
    template <typename T, typename U> void N(const LocalTensor<T>& dst, float a, \
        const LocalTensor<U>& b, uint32_t rows);
#define PC_REDUCE(N) template <typename T, typename U> void N(const LocalTensor<T>& dst, \
    const LocalTensor<U>& src, uint32_t validCols, uint32_t rows);
PC_UNARY(Exp) PC_UNARY(Ln) PC_UNARY(Sqrt) PC_UNARY(Rsqrt) PC_UNARY(Abs) PC_UNARY(Tanh)
PC_UNARY(Erf) PC_UNARY(Cast) PC_UNARY(Transpose)
template <typename T> void Duplicate(const LocalTensor<T>& dst, float value, uint32_t rows);
PC_BINARY(Add) PC_BINARY(Sub) PC_BINARY(Mul) PC_BINARY(Div) PC_BINARY(Max) PC_BINARY(Min)
PC_BINARY(CompareGT) PC_BINARY(CompareGE) PC_BINARY(CompareLT) PC_BINARY(CompareLE)
PC_BINARY(CompareEQ) PC_BINARY(CompareNE)
PC_REDUCE(ReduceSum) PC_REDUCE(ReduceMax) PC_REDUCE(ReduceMin)
template <typename T, typename C, typename A, typename B> void Select(const LocalTensor<T>& dst,
    const LocalTensor<C>& cond, const A& t, const B& f, uint32_t rows);
template <typename T, typename U> void Fixpipe(const LocalTensor<T>& dst,
                                               const LocalTensor<U>& src,
                                               const FixpipeParams& params);
enum PipeType { PIPE_ALL };
template <PipeType P> void PipeBarrier();
template <HardEvent E> void SetFlag(int32_t eventId);
template <HardEvent E> void WaitFlag(int32_t eventId);
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t AlignUp(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
}  // namespace AscendC
"""
